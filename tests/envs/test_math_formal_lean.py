"""math_formal_lean: extraction, the forbidden-token scan, message parsing, feedback turns,
failure classes -- for real; the compile step against SCRIPTED checkers (there is no Lean
toolchain here): a fake ``lean`` program on the sandbox's PATH (process boundary) and a
scripted Kimina Lean server on loopback (HTTP boundary)."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest
from aiohttp import web

from environments.math_formal_lean import lean_messages, proof
from environments.math_formal_lean.data.scripted_lean import check as scripted_check
from environments.math_formal_lean.verifier import NEMOTRON_REFINEMENT_PROMPT
from servers import registry
from servers.wire import ResponseObject, response_from_text

ENV_DIR = Path(__file__).resolve().parents[2] / "environments/math_formal_lean"
ROW = json.loads((ENV_DIR / "data/minif2f_rows.jsonl").read_text().splitlines()[0])  # mathd_algebra_478
GOOD = "  subst h₂ h₃\n  norm_num [h₁]"


def fenced(code: str) -> str:
    return f"Plan first.\n\n```lean4\n{code}\n```"


def answer(code: str) -> ResponseObject:
    return ResponseObject.model_validate(response_from_text(fenced(code)))


# ---- extraction and assembly -------------------------------------------------------------
def test_extraction_follows_nemo_gym():
    text = ("<think>try ```lean4\nwrong\n```</think>Answer:\n```lean\nfirst\n```\n"
            "```lean4\ntheorem t (a : ℕ) : a = a := by\n  rfl\n```")
    code, fenced_ = proof.extract_lean_code(text)
    assert fenced_ and code.startswith("theorem t") and proof.proof_body(code) == "  rfl"
    assert proof.extract_lean_code(text, mode="first")[0] == "theorem t (a : ℕ) : a = a := by\n  rfl"  # lean4 tag first
    assert proof.extract_lean_code("</think>```\nsimp\n```")[0] == "simp"
    assert proof.extract_lean_code("reasoning <think>unfinished ```lean4\nx\n```") == ("reasoning", False)
    assert proof.extract_lean_code("noise FINAL:\n```lean4\nomega\n```", final_answer_key="FINAL:")[0] == "omega"
    assert proof.proof_body("theorem t : True := by trivial") == "trivial"
    assert proof.proof_body("lemma t\n    (h : 1 = 1) :\n    True := by\n  exact trivial") == "  exact trivial"
    assert proof.proof_body("  nlinarith [h]") == "nlinarith [h]"  # no theorem: the code itself
    built = proof.build(fenced(f"{ROW['formal_statement']}{GOOD}"), ROW["header"], ROW["formal_statement"])
    assert built.file == ROW["header"] + ROW["formal_statement"] + GOOD and built.proof == GOOD
    assert proof.theorem_name(ROW["formal_statement"]) == "mathd_algebra_478"
    assert proof.theorem_name("example : True := by\n") is None


def test_forbidden_scan_ignores_comments_and_strings():
    forbidden = ["sorry", "admit", "axiom", "native_decide", "#exit", "debug.skipKernelTC"]
    clean = ('  -- no sorry here; /- admit /- nested axiom -/ still comment -/\n'
             '  have h_sorry : True := trivial\n  simp [show "sorry" = "sorry" from rfl]\n  decide')
    assert proof.forbidden_tokens(clean, forbidden) == []
    assert proof.forbidden_tokens("  exact (sorry)", forbidden) == ["sorry"]
    assert proof.forbidden_tokens("  norm_num\n\naxiom cheat : False", forbidden) == ["axiom"]
    assert proof.forbidden_tokens("  native_decide\n#exit", forbidden) == ["native_decide", "#exit"]
    assert proof.forbidden_tokens("  set_option debug.skipKernelTC true in\n  rfl", forbidden) == ["debug.skipKernelTC"]
    assert proof.forbidden_tokens('  exact "\\" sorry"', forbidden) == []  # an escaped quote does not end the string


def test_message_parsing_and_axioms():
    out = ("Proof.lean:10:2: error: unsolved goals\nx : ℕ\n⊢ x = x\n"
           "Proof.lean:12:0: warning: declaration uses 'sorry'\n"
           "'t' depends on axioms: [propext, sorryAx]\n")
    messages = lean_messages.parse_cli_output(out)
    assert [(m.severity, m.line) for m in messages] == [("error", 10), ("warning", 12), ("info", None)]
    assert messages[0].text == "unsolved goals\nx : ℕ\n⊢ x = x"
    assert lean_messages.uses_sorry(messages) and lean_messages.axioms_of(messages, "t") == ["propext", "sorryAx"]
    spoof = [lean_messages.LeanMessage("info", "'t' does not depend on any axioms"),
             lean_messages.LeanMessage("info", "'t' depends on axioms: [Lean.ofReduceBool]")]
    assert lean_messages.axioms_of(spoof, "t") == ["Lean.ofReduceBool"]  # the last report (the appended command) wins
    assert lean_messages.axioms_of(spoof, "u") is None
    repl = lean_messages.parse_repl_messages([{"severity": "error", "pos": {"line": 3, "column": 4},
                                               "endPos": {"line": 3, "column": 9}, "data": "bad"}])
    assert repl[0].as_dict() == {"severity": "error", "text": "bad", "line": 3, "column": 4, "end_line": 3, "end_column": 9}
    text = lean_messages.feedback("a\nb\n  linarith\nc", repl[:1] and [lean_messages.LeanMessage("error", "linarith failed", 3, 2)])
    assert "line 3, column 2" in text and "  <error>linarith" in text and "Message: linarith failed" in text


# ---- the local checker: a fake `lean` on the sandbox's PATH --------------------------------
@pytest.fixture
def fake_lean(tmp_path):
    """A directory with an executable ``lean`` that runs the scripted checker."""
    tools = tmp_path / "bin"
    tools.mkdir()
    program = tools / "lean"
    program.write_text(f'#!/bin/sh\nexec python3 {ENV_DIR}/data/scripted_lean.py "$@"\n')
    program.chmod(program.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    os.chmod(tmp_path, 0o755)
    os.chmod(tools, 0o755)
    return tools


def local_overrides(tools: Path, **extra):
    path = f"{tools}:{os.path.dirname(sys.executable)}:/usr/bin:/bin"
    return {"lean_command": ["lean"], "lean_env": {"PATH": path}, "lean_toolchain_dirs": [str(tools), str(ENV_DIR)],
            "memory_mb": 1024, "compile_timeout_s": 20.0, **extra}


async def _env(**overrides):
    env = registry.instantiate("math_formal_lean", overrides=overrides)
    await env.setup()
    return env


async def test_local_checker_outcomes(fake_lean):
    env = await _env(**local_overrides(fake_lean))
    try:
        assert (await env.health())["ok"]
        row = env.Row.model_validate(ROW)
        good = await env.verify(row, answer(ROW["formal_statement"] + GOOD), None)
        assert good.reward == 1.0 and good.failure_class is None
        assert good.extras["axioms"] == ["propext", "Classical.choice", "Quot.sound"]
        assert good.extras["compiler_output"]["process_status"] == "completed" and not good.extras["needs_correction"]
        bad = await env.verify(row, answer("  linarith -- scripted-lean: error linarith failed"), None)
        assert bad.reward == 0.0 and bad.extras["proof_status"] == "compile_error" and bad.extras["needs_correction"]
        assert "Message: linarith failed" in bad.extras["error_feedback"] and "<error>linarith" in bad.extras["error_feedback"]
        assert bad.extras["correction_prompt"].startswith("Here is a proof attempt for the following theorem in Lean4.")
        assert "Message: linarith failed" in bad.extras["correction_prompt"]
        assert NEMOTRON_REFINEMENT_PROMPT.split("{error_message}")[1] in bad.extras["correction_prompt"]
        scanned = await env.verify(row, answer("  sorry"), None)
        assert scanned.extras["proof_status"] == "forbidden" and "compile_s" not in scanned.extras  # never compiled
    finally:
        await env.close()


async def test_compiler_side_sorry_and_axioms_when_the_scan_is_off(fake_lean):
    env = await _env(**local_overrides(fake_lean, forbidden=[]))
    try:
        row = env.Row.model_validate(ROW)
        sorry = await env.verify(row, answer("  sorry"), None)
        assert (sorry.reward, sorry.extras["proof_status"]) == (0.0, "has_sorry")
        native = await env.verify(row, answer("  native_decide"), None)
        assert native.extras["proof_status"] == "bad_axioms" and "Lean.ofReduceBool" in native.extras["axioms"]
        cheat = await env.verify(row, answer("  exact cheat.elim\n\naxiom cheat : False"), None)
        assert cheat.extras["proof_status"] == "bad_axioms" and "cheat" in cheat.extras["axioms"]
    finally:
        await env.close()


async def test_local_failures_carry_a_class(fake_lean, tmp_path):
    env = await _env(**local_overrides(fake_lean, compile_timeout_s=1.0))
    zero = await _env(**local_overrides(fake_lean, compile_timeout_s=1.0, timeout_policy="zero"))
    missing = await _env(lean_command=["no-such-lean"], memory_mb=1024)
    try:
        row = env.Row.model_validate(ROW)
        slow = answer("  norm_num -- scripted-lean: sleep 5")
        masked = await env.verify(row, slow, None)
        assert masked.failure_class == "timeout" and masked.extras["proof_status"] == "timeout"
        scored = await zero.verify(row, slow, None)
        assert scored.failure_class is None and scored.reward == 0.0 and scored.extras["proof_status"] == "timeout"
        crashed = await env.verify(row, answer("  simp -- scripted-lean: crash"), None)
        assert crashed.failure_class == "sandbox_error" and "crashed" in crashed.failure_detail
        health = await missing.health()
        assert not health["ok"] and "no Lean toolchain" in health["hint"]
        absent = await missing.verify(row, answer(GOOD), None)
        assert absent.failure_class == "sandbox_error" and "could not run" in absent.failure_detail
    finally:
        for e in (env, zero, missing):
            await e.close()


# ---- the Kimina protocol: a scripted Lean server on loopback --------------------------------
class ScriptedKimina:
    """Answers POST /verify as kimina-lean-server does, from the scripted checker's rules."""

    def __init__(self, api_key: str | None = None) -> None:
        self.api_key = api_key
        self.requests: list[dict] = []
        self.fail_next: list[int] = []  # HTTP statuses to answer before working again
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def verify(self, request: web.Request) -> web.Response:
        if self.api_key and request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return web.json_response({"detail": "Invalid API key"}, status=401)
        body = await request.json()
        self.requests.append(body)
        if self.fail_next:
            return web.json_response({"detail": "no available REPLs"}, status=self.fail_next.pop(0))
        results = []
        for code in body["codes"]:
            outcome = scripted_check(code["proof"])
            if outcome["sleep"] > body["timeout"]:
                results.append({"custom_id": code["custom_id"], "error": f"Lean REPL command timed out in {body['timeout']} seconds"})
                continue
            messages = [{"severity": m["severity"], "pos": {"line": m["line"], "column": m["column"]},
                         "endPos": None, "data": m["text"]} for m in outcome["messages"]
                        if "declaration uses 'sorry'" not in m["text"]]
            sorries = [{"pos": {"line": m["line"], "column": 0}, "endPos": {"line": m["line"], "column": 5}, "goal": "⊢ False"}
                       for m in outcome["messages"] if "declaration uses 'sorry'" in m["text"]]
            response = {"env": 0, "messages": messages, "time": 0.01}
            if sorries:
                response["sorries"] = sorries
            results.append({"custom_id": code["custom_id"], "error": None, "response": response})
        return web.json_response({"results": results})

    async def health(self, _: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/verify", self.verify)
        app.router.add_get("/health", self.health)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
        return self.url

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


@pytest.fixture
async def kimina(monkeypatch):
    monkeypatch.setenv("VERIGYM_TEST_LEAN_KEY", "s3cret")
    server = ScriptedKimina(api_key="s3cret")
    await server.start()
    yield server
    await server.stop()


def kimina_overrides(server: ScriptedKimina, **extra):
    return {"checker": "kimina", "kimina_url": server.url, "kimina_api_key_env": "VERIGYM_TEST_LEAN_KEY",
            "compile_timeout_s": 5.0, **extra}


async def test_kimina_protocol(kimina):
    env = await _env(**kimina_overrides(kimina))
    try:
        assert (await env.health())["ok"]
        row = env.Row.model_validate(ROW)
        good = await env.verify(row, answer(GOOD), None)
        assert good.reward == 1.0 and good.extras["checker"] == "kimina"
        sent = kimina.requests[-1]
        assert sent["timeout"] == 5 and sent["disable_cache"] is False and len(sent["codes"]) == 1
        assert sent["codes"][0]["proof"].endswith("#print axioms mathd_algebra_478\n")
        bad = await env.verify(row, answer("  omega -- scripted-lean: error omega failed"), None)
        assert bad.extras["proof_status"] == "compile_error" and "omega failed" in bad.extras["error_feedback"]
        assert bad.extras["messages"][0]["line"] == 10
        no_scan = await _env(**kimina_overrides(kimina, forbidden=[], check_axioms=False))
        sorry = await no_scan.verify(row, answer("  sorry"), None)  # the REPL reports it in "sorries" only
        assert sorry.extras["proof_status"] == "has_sorry"
        await no_scan.close()
        slow = await env.verify(row, answer("  simp -- scripted-lean: sleep 60"), None)
        assert slow.failure_class == "timeout"
        kimina.fail_next = [429, 503]
        retried = await env.verify(row, answer(GOOD), None)
        assert retried.reward == 1.0 and not kimina.fail_next
        kimina.fail_next = [500]
        broken = await env.verify(row, answer(GOOD), None)
        assert broken.failure_class == "dependency_error" and "HTTP 500" in broken.failure_detail
    finally:
        await env.close()


async def test_kimina_down_and_wrong_key(kimina, monkeypatch):
    await kimina.stop()
    env = await _env(**kimina_overrides(kimina, kimina_retries=1))
    try:
        health = await env.health()
        assert not health["ok"] and "kimina-lean-server" in health["hint"]
        down = await env.verify(env.Row.model_validate(ROW), answer(GOOD), None)
        assert down.failure_class == "dependency_error" and "unavailable" in down.failure_detail
    finally:
        await env.close()
    server = ScriptedKimina(api_key="other")
    await server.start()
    env = await _env(**kimina_overrides(server))
    try:
        refused = await env.verify(env.Row.model_validate(ROW), answer(GOOD), None)
        assert refused.failure_class == "dependency_error" and "401" in refused.failure_detail
    finally:
        await env.close()
        await server.stop()


# ---- multi-turn over HTTP ------------------------------------------------------------------
async def test_session_feedback_turns_over_http(serve_env, kimina):
    client, _ = await serve_env("math_formal_lean", **kimina_overrides(kimina, max_checks_per_session=3))
    session = await client.seed_session("math_formal_lean", ROW)
    status, first = await client.call_tool(session, "check_proof", {"proof": fenced("  linarith -- scripted-lean: error linarith failed")})
    assert status == 200 and first["compiled"] is False and "linarith failed" in first["feedback"] and first["checks_left"] == 2
    _, second = await client.call_tool(session, "check_proof", {"proof": ROW["formal_statement"] + GOOD})
    assert second["compiled"] is True and second["status"] == "completed"
    compiles = len(kimina.requests)
    # The final message has no code: the last checked attempt is graded, from the session's compile.
    reply = await client.verify("math_formal_lean", ROW, response_from_text("Done: the proof above compiles."), session=session)
    assert reply["reward"] == 1.0 and reply["proof_status"] == "completed" and len(kimina.requests) == compiles
    session = await client.seed_session("math_formal_lean", ROW)
    for _ in range(3):
        await client.call_tool(session, "check_proof", {"proof": "  simp -- scripted-lean: error simp failed"})
    status, over = await client.call_tool(session, "check_proof", {"proof": GOOD})
    assert "check limit reached" in over["error"]
    await client.verify("math_formal_lean", ROW, response_from_text(fenced(GOOD)), session=session)


async def test_refinement_turn_fields_and_bad_rows(serve_env, kimina):
    client, _ = await serve_env("math_formal_lean", **kimina_overrides(kimina))
    reply = await client.verify("math_formal_lean", {**ROW, "turn_index": 2},
                                response_from_text(fenced("  nlinarith -- scripted-lean: error nlinarith failed")))
    assert reply["turn_index"] == 2 and reply["needs_correction"] is True and reply["reward"] == 0.0
    prompt = reply["correction_prompt"]
    assert prompt.startswith("Here is a proof attempt") and "Plan first." in prompt  # the raw attempt...
    assert "Message: nlinarith failed" in prompt  # ...and the compiler's error
    empty = await client.verify("math_formal_lean", ROW, response_from_text(""))
    assert empty["proof_status"] == "empty_generation" and empty["reward"] == 0.0
    from servers.client import EnvClientError
    with pytest.raises(EnvClientError) as bad:
        await client.verify("math_formal_lean", {k: v for k, v in ROW.items() if k != "header"}, response_from_text(fenced(GOOD)))
    assert bad.value.status == 422 and "header" in json.dumps(bad.value.body)


def test_container_backends_need_an_image():
    with pytest.raises(registry.ConfigError, match="needs lean_image"):
        registry.instantiate("math_formal_lean", overrides={"sandbox_backend": "container"})
    env = registry.instantiate("math_formal_lean", overrides={"sandbox_backend": "container", "lean_image": "lean-mathlib:4"})
    assert env.checker.image == "lean-mathlib:4"
    assert "extra_ro_binds" not in env.config.sandbox_options  # host binds are the process backend's only
