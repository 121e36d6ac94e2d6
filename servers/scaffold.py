"""``envs new NAME``: write a working environment folder to start from.

The scaffold is a real (small) verifier — the final line of the answer must equal the row's
``expected_answer`` after normalising case and whitespace — so the folder passes
``envs check`` and the conformance suite the moment it is written, and the author edits a
working thing instead of filling in blanks.
"""

from __future__ import annotations

import json
import keyword
import re
from pathlib import Path

from servers.wire import response_from_text

NAME_RE = re.compile(r"^[a-z][a-z0-9_]{1,47}$")


class ScaffoldError(ValueError):
    pass


def check_name(name: str) -> None:
    if not NAME_RE.match(name):
        raise ScaffoldError(f"invalid environment name {name!r}: use 2-48 characters, lowercase letters, digits "
                            "and '_', starting with a letter (it becomes a Python package and a URL path)")
    if keyword.iskeyword(name) or name in {"servers", "sandboxes", "trainer", "environments", "tests", "test"}:
        raise ScaffoldError(f"invalid environment name {name!r}: reserved word")


def class_name(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_") if part) + "Environment"


VERIFIER = '''"""{name}: reward 1 when the answer's final line equals the row's ``expected_answer``.

Written by ``envs new``; replace the scoring with your own. The contract is in
docs/adding-an-environment.md.
"""

from __future__ import annotations

from pydantic import Field

from servers.environment import EnvConfig, Environment, Verdict
from servers.wire import ResponseObject, RowModel


class {cls}Row(RowModel):
    """Row fields the verifier reads; every other field of the row is kept and echoed."""

    expected_answer: str = Field(min_length=1, description="The gold answer.")


class {cls}Config(EnvConfig):
    case_sensitive: bool = Field(False, description="Compare answers case-sensitively.")


def final_line(text: str) -> str:
    """The last non-empty line, with an optional 'Answer:' label removed."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    last = lines[-1]
    if last.lower().startswith("answer:"):
        last = last[len("answer:"):].strip()
    return " ".join(last.split())


class {cls}Environment(Environment):
    name = "{name}"
    domain = "{domain}"
    summary = "Final line of the answer equals expected_answer (case/whitespace-normalised)."
    needs = ()
    Row = {cls}Row
    Config = {cls}Config

    async def verify(self, row: {cls}Row, response: ResponseObject, session: object | None) -> Verdict:
        got = final_line(response.output_text)
        want = " ".join(row.expected_answer.split())
        if not self.config.case_sensitive:
            got, want = got.casefold(), want.casefold()
        return Verdict(reward=1.0 if got == want else 0.0, extras={{"extracted_answer": got}})
'''

CONFIG = """# Defaults for the {name} environment. Override with `envs serve {name} key=value`
# or a --config file. Unknown keys are an error.

# Compare answers case-sensitively.
case_sensitive: false

# Framework keys (every environment has them; see docs/adding-an-environment.md):
# Largest accepted request body in MiB; larger gets 413.
max_body_mb: 16
# Verifications running at once; beyond max_queued waiting, the server answers 503.
max_concurrent: 256
max_queued: 8192
# Deadline of one /verify in seconds; past it the reply carries failure class 'timeout'.
verify_timeout_s: 30
"""

README = """# {name}

Reward 1.0 when the final non-empty line of the model's answer (an optional `Answer:`
label removed) equals the row's `expected_answer`, after collapsing whitespace and, unless
`case_sensitive`, ignoring case; otherwise 0.0. Written by `envs new`: replace the scoring.

## Row fields
- `responses_create_params` (required by NeMo-Gym): the prompt.
- `expected_answer` (string, required): the gold answer.

Other fields are kept and echoed in the reply.

## Reply fields
- `reward`: 1.0 or 0.0.
- `extracted_answer`: the normalised final line that was compared.

## Config keys
- `case_sensitive` (default false): compare case-sensitively.
- framework keys (`max_body_mb`, `max_concurrent`, `max_queued`, `verify_timeout_s`, ...).

## Try it
    envs check {name}
    envs serve {name} --port 8000

## Known limits
Exact string match only: no numeric or symbolic equivalence.
"""


def _row(question: str, answer: str, text: str, expected: dict) -> str:
    row = {
        "responses_create_params": {"input": [{"role": "user", "content": question}]},
        "expected_answer": answer,
        "response": response_from_text(text),
        "_expected": expected,
    }
    return json.dumps(row)


def examples() -> str:
    rows = [
        _row("What is the capital of France? Put the answer on the last line.", "Paris",
             "The capital of France is Paris.\nAnswer: paris", {"reward": 1.0, "fields": {"extracted_answer": "paris"}}),
        _row("What is 2 + 3? Put the answer on the last line.", "5", "2 + 3 = 6\n6",
             {"reward": 0.0, "fields": {"extracted_answer": "6"}}),
        _row("An empty response scores zero.", "42", "", {"reward": 0.0}),
    ]
    malformed = {"responses_create_params": {"input": [{"role": "user", "content": "No gold answer."}]},
                 "response": response_from_text("42"), "_expected": {"status": 422}}
    return "\n".join(rows + [json.dumps(malformed)]) + "\n"


def scaffold(name: str, root: Path, *, domain: str = "knowledge") -> Path:
    """Write ``root/name/`` and return it. Refuses invalid names and existing folders."""
    check_name(name)
    from servers import registry

    known = registry.discover()
    if name in known:
        # Discovery keeps the first folder of a name (environments/ before --env-path), so a
        # second one would be silently shadowed: `envs check NAME` would test the other one.
        raise ScaffoldError(f"an environment named {name!r} already exists ({known[name].folder}); pick another name")
    folder = root / name
    if folder.exists():
        raise ScaffoldError(f"{folder} already exists; pick another name or remove it")
    if not root.is_dir():
        raise ScaffoldError(f"{root} is not a directory")
    cls = class_name(name)[: -len("Environment")] or "Env"
    (folder / "data").mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    (folder / "verifier.py").write_text(VERIFIER.format(name=name, cls=cls, domain=domain))
    (folder / "config.yaml").write_text(CONFIG.format(name=name))
    (folder / "README.md").write_text(README.format(name=name))
    (folder / "data" / "example.jsonl").write_text(examples())
    return folder
