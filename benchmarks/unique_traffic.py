"""Request bodies where every response is different, so no cache decides a throughput figure.

Real RL traffic is many different responses per prompt; a benchmark that cycles a handful of
example rows mostly measures the result caches. ``unique_bodies(name, rows, n, seed)`` turns an
environment's scored example rows into ``n`` distinct ``/verify`` bodies:

* mcqa: a random reasoning sentence and a random option letter in ``\\boxed{}``;
* math: gold/answer pairs that need symbolic comparison (``k\\sqrt{m}`` vs ``\\sqrt{k^2 m}``,
  ``(x+a)(x+b)`` vs its expansion, fractions of polynomials), equal or off by one, drawn fresh
  for every request (golds repeat as in a GRPO group, answers do not). All four forms are
  inside the grammar of math's symbolic fast path (environments/math_grading/symbolic.py), so they
  measure it; ``math_forms="sympy"`` draws pairs only math-verify decides (a fractional power,
  Euler's ``e``) instead;
* instruction_following: responses generated from templates (paragraphs, sentences, bullets,
  titles, case, the row's keywords / end phrase / postscript), so some follow the row's
  instructions and some do not;
* everything else: JSON (a message that is JSON, function-call arguments) gets its values
  perturbed and one string a random number, prose gets a random sentence in front (the final
  answer stays last); structured_outputs' YAML/XML/TOML/CSV texts get new digits.

``unique_fraction`` reports how many bodies really differ (1.0 unless the generator is broken).
"""

from __future__ import annotations

import copy
import json
import random
import re
from typing import Any, Callable

import orjson

WORDS = ("model river signal quiet garden number window orange planet carbon theory market simple "
         "balance memory engine silver winter summer method future travel letter animal history "
         "village bridge circle forest kitchen mountain pattern problem reason second system world").split()
Row = dict[str, Any]


def _sentence(rng: random.Random, lo: int = 5, hi: int = 14) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(lo, hi))]
    return " ".join(words).capitalize() + "."


def _set_text(row: Row, text: str) -> None:
    for item in row["response"]["output"]:
        if item.get("type") == "message" and isinstance(item.get("content"), list) and item["content"]:
            item["content"][0]["text"] = text
            del item["content"][1:]
            return
    from servers.wire import text_message

    row["response"]["output"].append(text_message(text))


def _text(row: Row) -> str:
    for item in row["response"]["output"]:
        if item.get("type") == "message":
            content = item.get("content")
            return content if isinstance(content, str) else "".join(c.get("text") or "" for c in content or [])
    return ""


def vary_mcqa(row: Row, rng: random.Random) -> None:
    letters = [next(iter(o)) for o in row.get("options") or []] or list("ABCD")
    _set_text(row, f"{_sentence(rng)} {_sentence(rng)}\n\\boxed{{{rng.choice(letters)}}}")


def vary_instruction_following(row: Row, rng: random.Random) -> None:
    kwargs = [k or {} for k in row.get("kwargs") or []]
    merged: dict[str, Any] = {k: v for kw in kwargs for k, v in kw.items() if v is not None}
    paragraphs = []
    for _ in range(int(merged.get("num_paragraphs") or rng.randint(1, 4))):
        paragraphs.append(" ".join(_sentence(rng) for _ in range(rng.randint(1, 5))))
    if merged.get("num_bullets") or rng.random() < 0.2:
        paragraphs.append("\n".join(f"* {_sentence(rng, 3, 8)}" for _ in range(int(merged.get("num_bullets") or 3))))
    for key in ("keyword", "keyword1", "keyword2", "word"):
        if isinstance(merged.get(key), str) and rng.random() < 0.8:
            paragraphs[0] += f" {merged[key]}" * int(merged.get("frequency") or 1)
    for keyword in merged.get("keywords") or []:
        if rng.random() < 0.8:
            paragraphs[-1] += f" {keyword}"
    if rng.random() < 0.3:
        paragraphs.insert(0, f"<<{_sentence(rng, 2, 4).rstrip('.')}>>")
    separator = "\n\n***\n\n" if "paragraphs:paragraphs" in (row.get("instruction_id_list") or []) else "\n\n"
    text = separator.join(paragraphs)
    if isinstance(merged.get("end_phrase"), str) and rng.random() < 0.8:
        text += " " + merged["end_phrase"]
    if isinstance(merged.get("postscript_marker"), str):
        text += f"\n\n{merged['postscript_marker']} {_sentence(rng)}"
    case = rng.random()
    _set_text(row, text.lower() if case < 0.2 else text.upper() if case < 0.3 else text)


def _perturb_json(value: Any, rng: random.Random) -> Any:
    if isinstance(value, dict):
        return {k: _perturb_json(v, rng) for k, v in value.items()}
    if isinstance(value, list):
        return [_perturb_json(v, rng) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return value + rng.randint(-3, 3) if rng.random() < 0.5 else value
    if isinstance(value, str):
        return value + rng.choice(WORDS) if rng.random() < 0.5 else value
    return value


def _mark_one_string(value: Any, rng: random.Random) -> bool:
    """Append a random number to one string leaf (the perturbation alone can repeat on small objects)."""
    leaves: list[tuple[Any, Any]] = []

    def walk(node: Any) -> None:
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, child in items:
            if isinstance(child, str):
                leaves.append((node, key))
            else:
                walk(child)

    walk(value)
    if not leaves:
        return False
    node, key = rng.choice(leaves)
    node[key] = f"{node[key]}{rng.randint(0, 10**9)}"
    return True


def vary_generic(row: Row, rng: random.Random, structured: bool = False) -> None:
    nonce = f"{rng.getrandbits(48):x}"
    for item in row["response"]["output"]:
        if item.get("type") == "function_call" and isinstance(item.get("arguments"), str):
            try:
                args = json.loads(item["arguments"])
            except ValueError:
                continue
            if isinstance(args, dict):
                args = _perturb_json(args, rng)
                _mark_one_string(args, rng)
                item["arguments"] = json.dumps(args)
    text = _text(row)
    if text:
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        if isinstance(parsed, (dict, list)):
            parsed = _perturb_json(parsed, rng)
            _mark_one_string(parsed, rng)
            _set_text(row, json.dumps(parsed, indent=rng.choice((None, 1, 2))))
        elif structured:  # YAML / XML / TOML / CSV: new digits and a comment keep it well-formed
            text = re.sub(r"\d", lambda _m: str(rng.randint(0, 9)), text)
            first = text.lstrip().split("\n", 1)[0]
            if first.startswith("<"):
                text += f"\n<!-- {nonce} -->"
            elif ":" in first or "=" in first or first.startswith("-"):
                text += f"\n# {nonce}"
            _set_text(row, text)
        else:
            _set_text(row, f"{_sentence(rng)} ({nonce})\n{text}")
    # A unique response id always: a number-only JSON answer or a digit-free CSV text can come
    # out of the perturbation unchanged (structured_outputs was 6% repeats without it).
    row["response"]["id"] = f"resp_{nonce}"


_SYMBOLIC: tuple[Callable[[random.Random], tuple[str, str]], ...] = (
    lambda r: (lambda k, m: (f"{k}\\sqrt{{{m}}}", f"\\sqrt{{{k * k * m}}}"))(r.randint(2, 30), r.choice((2, 3, 5, 6, 7))),
    lambda r: (lambda a, b: (f"(x+{a})(x+{b})", f"x^2+{a + b}x+{a * b}"))(r.randint(1, 40), r.randint(1, 40)),
    lambda r: (lambda a: (f"\\frac{{x^2-{a * a}}}{{x-{a}}}", f"x+{a}"))(r.randint(1, 60)),
    lambda r: (lambda a, b: (f"\\frac{{{a}}}{{\\sqrt{{{b}}}}}", f"\\frac{{{a}\\sqrt{{{b}}}}}{{{b}}}"))(r.randint(1, 50),
                                                                                                 r.choice((2, 3, 5, 7))),
)


# Pairs outside the symbolic fast path's grammar (a fractional power, Euler's e): math-verify decides.
_SYMPY_ONLY: tuple[Callable[[random.Random], tuple[str, str]], ...] = (
    lambda r: (lambda k, m: (f"{k}\\sqrt{{{m}}}", f"({k * k * m})^{{1/2}}"))(r.randint(2, 30), r.choice((2, 3, 5, 6, 7))),
    lambda r: (lambda a, b: (f"e^{{{a}}}e^{{{b}}}", f"e^{{{a + b}}}"))(r.randint(1, 40), r.randint(1, 40)),
)


def math_bodies(template: Row, n: int, rng: random.Random, golds: int = 64,
                forms: tuple[Callable[[random.Random], tuple[str, str]], ...] = _SYMBOLIC) -> list[Row]:
    """Rows whose (gold, answer) pairs need symbolic comparison; ``golds`` distinct golds, every answer fresh."""
    pool = []
    for _ in range(golds):
        form = rng.choice(forms)
        pool.append((form, *form(rng)))
    rows = []
    for _ in range(n):
        form, gold, answer = rng.choice(pool)
        c = rng.randint(1, 10**6)
        # Half wrong (off by a constant that varies per request), half equal but written differently.
        answer = f"{answer}+{c}" if rng.random() < 0.5 else f"{answer}+{c}-{c}"
        row = copy.deepcopy(template)
        row["expected_answer"] = gold
        _set_text(row, f"{_sentence(rng)}\nThe answer is \\boxed{{{answer}}}.")
        rows.append(row)
    return rows


VARIERS: dict[str, Callable[[Row, random.Random], None]] = {
    "mcqa": vary_mcqa,
    "instruction_following": vary_instruction_following,
    "structured_outputs": lambda row, rng: vary_generic(row, rng, structured=True),
}


def unique_bodies(name: str, rows: list[Row], n: int, seed: int = 0, *,
                  math_forms: str = "symbolic") -> tuple[list[bytes], float]:
    """``n`` serialised ``/verify`` bodies, each response different; and the fraction that is unique.
    ``math_forms``: "symbolic" (pairs the symbolic fast path decides) or "sympy" (pairs only
    math-verify decides)."""
    rng = random.Random(seed)
    clean = [{k: v for k, v in row.items() if k not in ("_expected", "_script")} for row in rows]
    if name == "math":
        varied = math_bodies(clean[0], n, rng, forms=_SYMPY_ONLY if math_forms == "sympy" else _SYMBOLIC)
    else:
        vary = VARIERS.get(name, vary_generic)
        varied = []
        for i in range(n):
            row = copy.deepcopy(clean[i % len(clean)])
            vary(row, rng)
            varied.append(row)
    bodies = [orjson.dumps(row) for row in varied]
    return bodies, len(set(bodies)) / len(bodies)
