"""Pure parts of the code environment: extraction and output comparison (no sandbox)."""

from __future__ import annotations

from environments.code.compare import call_matches, stdio_matches
from environments.code.extract import extract_code


def test_last_python_block_wins():
    text = "```python\nprint(1)\n```\nbetter:\n```py\nprint(2)\n```\n"
    assert extract_code(text) == "print(2)"


def test_python_block_preferred_over_later_other_language():
    text = "```python\nprint(1)\n```\nIn C++ it would be:\n```cpp\nint main(){}\n```"
    assert extract_code(text) == "print(1)"


def test_untagged_fallback_and_none():
    assert extract_code("```\nx = 1\nprint(x)\n```") == "x = 1\nprint(x)"
    assert extract_code("no code here") is None
    assert extract_code("```python\n\n```") is None


def test_reasoning_before_think_end_is_ignored():
    text = "<think>```python\nprint('draft')\n```</think>final:\n```python\nprint('final')\n```"
    assert extract_code(text) == "print('final')"
    assert extract_code("<think>```python\nprint('draft')\n```</think>no code after") is None


def test_unterminated_final_python_block():
    assert extract_code("Here:\n```python\nprint(5)\n") == "print(5)"


def test_inline_fences_inside_code_do_not_split_blocks():
    text = "```python\ns = '```'\nprint(s)\n```"
    assert extract_code(text) == "s = '```'\nprint(s)"


def test_stdio_whitespace_tolerance_like_lcb():
    assert stdio_matches("1 2 \n3\n\n", "1 2\n3")
    assert stdio_matches("1  2\r\n", "1 2\n")
    assert not stdio_matches("1\n2", "1 2")
    assert not stdio_matches("YES", "NO")
    # An empty line in the middle is significant (LCB compares line counts).
    assert stdio_matches("1\n3 \n-1\n0\n\n2\n1 2 \n", "1\n3\n-1\n0\n\n2\n1 2")
    assert not stdio_matches("1\n3\n-1\n0\n2\n1 2", "1\n3\n-1\n0\n\n2\n1 2")


def test_stdio_numbers():
    assert stdio_matches("1.0 2.50", "1 2.5")  # Decimal equality, as LCB
    assert stdio_matches("0.333333333", "0.3333333333333")  # within 1e-6
    assert not stdio_matches("0.3334", "0.3333333")
    assert not stdio_matches("0.333333333", "0.3333333333333", tolerance=0.0)
    assert not stdio_matches("nan", "nan0")
    assert not stdio_matches("inf", "1e400")


def test_call_based_comparison():
    assert call_matches("[0, 1]", "[0, 1]")
    assert call_matches("2.5000000001", "2.5")
    assert not call_matches("2", "2.5")
    assert not call_matches("true", "1")  # bool is not int
    assert not call_matches("[3]", "3")
    assert not call_matches("not json", "3")
    assert call_matches('{"a": [1, 2]}', '{"a": [1, 2]}')


def test_integer_answers_are_exact_whatever_the_tolerance():
    # A relative tolerance must not accept a wrong integer: 1000000008 is off by one from the
    # classic modulus, a relative error of 1e-9.
    assert not stdio_matches("1000000008", "1000000007")
    assert not stdio_matches("1000000007.5", "1000000007")
    assert not stdio_matches("123456789012345678901234567891", "123456789012345678901234567890")
    assert stdio_matches("1000000007.0", "1000000007")  # equal values still pass
    assert not call_matches("1000000008", "1000000007")
    assert not call_matches("1000000008.0", "1000000007")
    assert call_matches("[1, 2.0000000001]", "[1, 2.0]")


def test_numbers_beyond_float_range_are_not_close_by_overflow():
    assert not stdio_matches("1" + "0" * 400, "2" + "0" * 400)
    assert not stdio_matches("1e400", "2e400")
    assert stdio_matches("1.0000000001e400", "1e400")
    assert not call_matches("1" + "0" * 400, "1.5")  # used to raise OverflowError (verifier_error)
