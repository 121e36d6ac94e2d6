"""Resolve ``_hf_placeholder`` rows the way the Nemotron recipe's ``fill_placeholders.py`` does.

For licensing reasons the Nemotron RL blends ship some math rows without their text:
``{"dataset": "<name>", "_hf_placeholder": {"row": i, "question_template": T}, ...}``.
The text lives in a public source dataset (nemo-rl.md §5.2):

* ``..._dapo17k`` -> ``BytedTsinghua-SIA/DAPO-Math-17k`` (split ``train``). The source
  question at ``prompt[0].content`` is wrapped in DAPO's own instruction; we keep the middle
  of its ``\\n\\n``-separated parts (the problem), then apply the blend's template
  ``prefix + q + suffix`` and strip trailing newlines.
* ``..._skywork*`` -> ``Skywork/Skywork-OR1-RL-Data`` (split ``math``): ``{question}`` in the
  template is replaced; the row's ``question`` is the raw source question.

The answer (``reward_model.ground_truth``) is parsed as JSON when it is JSON: first element
of a list, first value of a dict. The row gets ``question``, ``expected_answer`` and
``responses_create_params = {input: [{role: user, content: full_question}]}``; the
placeholder key is dropped and every other field kept.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable

PLACEHOLDER_KEY = "_hf_placeholder"


@dataclass(frozen=True)
class PlaceholderSource:
    repo: str
    split: str
    template: str  # "dapo" | "skywork"
    question_path: tuple[str | int, ...] = ("prompt", 0, "content")
    answer_path: tuple[str | int, ...] = ("reward_model", "ground_truth")


_DAPO = PlaceholderSource("BytedTsinghua-SIA/DAPO-Math-17k", "train", "dapo")
_SKYWORK = PlaceholderSource("Skywork/Skywork-OR1-RL-Data", "math", "skywork")

# Dataset names as they appear in the blends (super3 and nano3 recipes).
SOURCES: dict[str, PlaceholderSource] = {
    "super_v3_lcsft_step1000_dapo17k": _DAPO,
    "super_v3_lcsft_step1000_skyworks": _SKYWORK,
    "nano_v3_sft_profiled_dapo17k": _DAPO,
    "nano_v3_sft_profiled_skywork_no_omni": _SKYWORK,
}


class PlaceholderError(ValueError):
    pass


class PlaceholderSourceError(RuntimeError):
    """A source dataset cannot be loaded (offline, not in the cache, a bad local copy): every
    placeholder row of it fails alike, so this ends the prep with one line, not a row each."""


# Short names a user may give on the command line (``--placeholder-source dapo=FILE``).
ALIASES: dict[str, PlaceholderSource] = {"dapo": _DAPO, "skywork": _SKYWORK}


def local_sources_from_cli(pairs: list[str]) -> dict[str, str]:
    """``["dapo=FILE", "Skywork/Skywork-OR1-RL-Data=DIR", "nano_v3_..._dapo17k=FILE"]`` ->
    ``{dataset name: path}`` for every blend dataset name the key stands for: a short name
    (dapo, skywork), the source's hub id, or one dataset name as the blends spell it."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, path = pair.partition("=")
        if not sep or not key or not path:
            raise PlaceholderError(f"--placeholder-source {pair!r}: expected NAME=PATH, e.g. dapo=./DAPO-Math-17k.parquet")
        if key in SOURCES:
            names = [key]
        else:
            source = ALIASES.get(key.lower()) or next((s for s in SOURCES.values() if s.repo == key), None)
            if source is None:
                known = sorted({*ALIASES, *(s.repo for s in SOURCES.values()), *SOURCES})
                raise PlaceholderError(f"--placeholder-source {key!r}: not a placeholder source; one of {', '.join(known)}")
            names = [name for name, s in SOURCES.items() if s == source]
        out.update({name: path for name in names})
    return out


def nested(record: Any, path: tuple[str | int, ...]) -> Any:
    for key in path:
        if isinstance(record, dict):
            record = record.get(key)
        elif isinstance(record, list) and isinstance(key, int) and -len(record) <= key < len(record):
            record = record[key]
        else:
            return None
    return record


def strip_dapo_wrapper(text: str) -> str:
    """DAPO-Math-17k prompts are 'instruction\\n\\nPROBLEM\\n\\nreminder': keep the middle."""
    parts = text.split("\n\n")
    return "\n\n".join(parts[1:-1]) if len(parts) >= 3 else text


def parse_answer(raw: Any) -> str:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            return raw
    if isinstance(raw, list):
        raw = raw[0] if raw else ""
    elif isinstance(raw, dict):
        raw = next(iter(raw.values()), "")
    return str(raw)


def resolve_row(row: dict[str, Any], fetch: Callable[[str, int], dict[str, Any]]) -> dict[str, Any]:
    """The filled row. ``fetch(dataset_name, index)`` returns the source dataset's row."""
    placeholder = row[PLACEHOLDER_KEY]
    name = row.get("dataset")
    source = SOURCES.get(name)
    if source is None:
        raise PlaceholderError(f"placeholder row names dataset {name!r}; known sources: {sorted(SOURCES)}")
    if not isinstance(placeholder, dict) or not isinstance(placeholder.get("row"), int):
        raise PlaceholderError(f"{PLACEHOLDER_KEY} must be {{row: int, question_template: ...}}, got {placeholder!r}")
    source_row = fetch(name, placeholder["row"])
    raw_question = nested(source_row, source.question_path)
    if not isinstance(raw_question, str):
        raise PlaceholderError(f"{source.repo} row {placeholder['row']}: no question at {list(source.question_path)}")
    answer = nested(source_row, source.answer_path)
    if answer is None:
        raise PlaceholderError(f"{source.repo} row {placeholder['row']}: no answer at {list(source.answer_path)}")
    template = placeholder.get("question_template")
    if source.template == "dapo":
        problem = strip_dapo_wrapper(raw_question)
        tpl = template if isinstance(template, dict) else {}
        full = (tpl.get("prefix", "") + problem + tpl.get("suffix", "")).rstrip("\n")
        question = full
    else:
        problem = raw_question
        full = template.replace("{question}", problem) if isinstance(template, str) and "{question}" in template \
            else problem
        question = problem
    out = {k: v for k, v in row.items() if k != PLACEHOLDER_KEY}
    out.update(question=question, expected_answer=parse_answer(answer),
               responses_create_params={"input": [{"role": "user", "content": full}]})
    return out


class SourceTables:
    """Lazily loads each source dataset once with ``datasets`` (hub id, or a local override
    ``{dataset_name: path}`` — a JSONL/parquet file or folder in the source's own format)."""

    def __init__(self, local: dict[str, str] | None = None):
        self.local = local or {}
        self._tables: dict[str, Any] = {}

    def fetch(self, name: str, index: int) -> dict[str, Any]:
        table = self._tables.get(name)
        if table is None:
            # Materialised once as Python rows: indexed access into an Arrow-backed Dataset costs
            # ~100x more per row, and the sources are small (17k / 105k rows).
            table = self._tables[name] = self._load(name).to_list()
        if not 0 <= index < len(table):
            raise PlaceholderError(f"placeholder row {index} is out of range for {name} ({len(table)} rows)")
        return table[index]

    def _load(self, name: str) -> Any:
        import datasets

        source = SOURCES[name]
        path = self.local.get(name)
        alias = next(a for a, s in ALIASES.items() if s == source)
        try:
            if path is None:
                return datasets.load_dataset(source.repo, split=source.split)
            if path.endswith((".jsonl", ".json")):
                return datasets.load_dataset("json", data_files=path, split="train")
            if path.endswith(".parquet"):
                return datasets.load_dataset("parquet", data_files=path, split="train")
            return datasets.load_dataset(path, split=source.split)
        except Exception as exc:  # noqa: BLE001 - datasets raises ConnectionError, FileNotFoundError, its own types
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            where = f"the local copy {path}" if path else f"hf://{source.repo} (split {source.split})"
            raise PlaceholderSourceError(
                f"cannot load placeholder source {name} from {where} ({type(exc).__name__}: {reason}). Offline? "
                f"Pass --placeholder-source {alias}=FILE (a JSONL or parquet copy of {source.repo}'s "
                f"{source.split} split, or its downloaded folder), or set HF_DATASETS_OFFLINE=1 with it in the "
                "Hugging Face cache") from None

    def describe(self) -> dict[str, str]:
        return {name: self.local.get(name, f"hf://{SOURCES[name].repo}:{SOURCES[name].split}") for name in self._tables}
