"""tinycalc: the SWE test instance's repository (a tiny package with one bug)."""
