"""The code environment end to end in-process, on the real process (bubblewrap) sandbox."""

from __future__ import annotations

import pytest

from servers import registry
from servers.service import EnvService
from servers.wire import response_from_text


def row(code: str | None, inputs: list[str], outputs: list[str], fn_name: str | None = None,
        text: str | None = None) -> dict:
    tests: dict = {"inputs": inputs, "outputs": outputs}
    if fn_name:
        tests["fn_name"] = fn_name
    reply = text if text is not None else f"Solution:\n```python\n{code}\n```\n"
    return {"responses_create_params": {"input": [{"role": "user", "content": "solve"}]},
            "verifier_metadata": {"unit_tests": tests}, "response": response_from_text(reply)}


@pytest.fixture
async def service(request):
    overrides = {"test_timeout_s": 1.5, **getattr(request, "param", {})}
    env = registry.instantiate("code", overrides=overrides)
    svc = EnvService(env)
    await svc.start()
    yield svc
    await svc.stop()


async def verify(service: EnvService, body: dict) -> dict:
    status, reply = await service.verify(body)
    assert status == 200, reply
    assert "_ng_failure_class" not in reply, reply.get("_ng_failure_detail")
    return reply


async def test_accepted_with_times_and_code(service):
    reply = await verify(service, row("a, b = map(int, input().split())\nprint(a + b)", ["1 2\n", "5 7\n"], ["3\n", "12"]))
    assert reply["reward"] == 1.0 and reply["verdicts"] == ["AC", "AC"]
    assert reply["extracted_model_code"].startswith("a, b = map")
    assert all(t["wall_s"] >= 0 and "cpu_s" in t for t in reply["tests"])
    assert reply["result"] == [True, True]


async def test_wrong_answer(service):
    reply = await verify(service, row("print(int(input()) + 1)", ["1\n", "2\n"], ["2", "4"]))
    assert reply["reward"] == 0.0 and reply["verdicts"] == ["AC", "WA"] and reply["first_failure"] == "WA"


async def test_runtime_error_and_stop_at_first_failure(service):
    code = "x = int(input())\nprint(10 // x)"
    reply = await verify(service, row(code, ["0\n", "5\n"], ["0", "2"]))
    assert reply["verdicts"] == ["RE", "SKIPPED"] and reply["reward"] == 0.0
    assert "ZeroDivisionError" in reply["tests"][0]["detail"]


async def test_fraction_mode_runs_every_test():
    env = registry.instantiate("code", overrides={"reward_mode": "fraction"})
    svc = EnvService(env)
    await svc.start()
    try:
        reply = await verify(svc, row("x = int(input())\nprint(10 // x)", ["0\n", "5\n", "2\n", "1\n"], ["0", "2", "5", "0"]))
        assert reply["verdicts"] == ["RE", "AC", "AC", "WA"]
        assert reply["reward"] == pytest.approx(0.5)
    finally:
        await svc.stop()


async def test_time_limit_exceeded(service):
    reply = await verify(service, row("while True:\n    pass", ["1\n"], ["1"]))
    assert reply["verdicts"] == ["TLE"] and reply["reward"] == 0.0
    reply = await verify(service, row("import time\ntime.sleep(30)", ["1\n"], ["1"]))
    assert reply["verdicts"] == ["TLE"]
    assert reply["unit_tests_time_taken"] < 10


async def test_syntax_error_is_compile_error_not_wrong_answer(service):
    reply = await verify(service, row("def f(:\n    return 1", ["1\n"], ["1"]))
    assert reply["reward"] == 0.0 and reply["first_failure"] == "CE"
    assert "SyntaxError" in reply["compile_error"] and reply["verdicts"] == []


async def test_no_code_block(service):
    reply = await verify(service, row(None, ["1\n"], ["1"], text="I think the answer is 1."))
    assert reply["reward"] == 0.0 and reply["first_failure"] == "NO_CODE" and reply["extracted_model_code"] is None


async def test_fn_name_class_solution_and_top_level(service):
    cls = ("from typing import List\nclass Solution:\n    def maxSub(self, nums: List[int]) -> int:\n"
           "        best = cur = nums[0]\n        for x in nums[1:]:\n            cur = max(x, cur + x)\n"
           "            best = max(best, cur)\n        return best\n")
    reply = await verify(service, row(cls, ["[-2,1,-3,4,-1,2,1,-5,4]", "[1]", "[5,4,-1,7,8]"], ["6", "1", "23"], "maxSub"))
    assert reply["reward"] == 1.0, reply["tests"]
    top = "def pair(a, b):\n    return (b, a)\n"
    reply = await verify(service, row(top, ['1\n"x"', '[1]\n{"k": 2}'], ['["x", 1]', '[{"k": 2}, [1]]'], "pair"))
    assert reply["reward"] == 1.0, reply["tests"]
    reply = await verify(service, row("def other():\n    return 1\n", ["1"], ["1"], "pair"))
    assert reply["verdicts"] == ["RE"] and "no function" in reply["tests"][0]["detail"]


async def test_call_based_printing_does_not_count_as_return_value(service):
    code = "class Solution:\n    def f(self, x):\n        print(x * 2)\n"
    reply = await verify(service, row(code, ["3"], ["6"], "f"))
    assert reply["verdicts"] == ["WA"]  # returned None; the printed 6 is not the result


@pytest.mark.parametrize("blank", ["", "   "])
async def test_blank_fn_name_means_stdin_stdout(service, blank):
    # Datasets write fn_name "" for stdin/stdout problems; it used to make every test a failed call.
    body = row("print(int(input()) * 2)", ["3\n", "5\n"], ["6\n", "10\n"])
    body["verifier_metadata"]["unit_tests"]["fn_name"] = blank
    reply = await verify(service, body)
    assert reply["reward"] == 1.0 and reply["verdicts"] == ["AC", "AC"], reply["tests"]


# Summing 2M numbers takes ~0.5 s idle and went past 1.5 s (TLE) at load 12 on 2 cores: this
# test is about 10 MB of stdin arriving intact, so it gets a per-test limit that load cannot reach.
@pytest.mark.parametrize("service", [{"test_timeout_s": 30.0}], indirect=True)
async def test_large_stdin(service):
    n = 1_000_000
    data = "\n".join(str(i % 1000) for i in range(n)) + "\n"  # ~3.9 MB
    data = data * 2 + "\n" * 2_000_000                          # ~10 MB
    expected = str(2 * sum(i % 1000 for i in range(n)))
    code = "import sys\nprint(sum(int(t) for t in sys.stdin.buffer.read().split()))"
    assert len(data) > 9_500_000
    reply = await verify(service, row(code, [data], [expected]))
    assert reply["verdicts"] == ["AC"], reply["tests"]


async def test_unicode_round_trip(service):
    reply = await verify(service, row("s = input()\nprint(s[::-1], len(s))", ["héllo wörld ✓ 漢字\n"], ["字漢 ✓ dlröw olléh 16"]))
    assert reply["verdicts"] == ["AC"], reply["tests"]


async def test_memory_and_output_limits(service):
    reply = await verify(service, row("x = bytearray(8 * 1024 ** 3)\nprint(1)", ["1"], ["1"]))
    assert reply["verdicts"] == ["MLE"]
    reply = await verify(service, row("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)", ["1"], ["1"]))
    assert reply["verdicts"] == ["OLE"]


async def test_exit_status_and_printed_verdicts_cannot_fake_a_pass(service):
    fake = "import sys\nprint('AC')\nprint('All tests passed', file=sys.stderr)\nsys.exit(0)"
    reply = await verify(service, row(fake, ["1\n"], ["2"]))
    assert reply["verdicts"] == ["WA"] and reply["reward"] == 0.0
    # os._exit(0) before flushing: nothing printed, still judged on output.
    reply = await verify(service, row("import os\nprint(2)\nos._exit(0)", ["1\n"], ["2"]))
    assert reply["verdicts"] == ["WA"]


async def test_forged_records_are_ignored(service):
    # The program knows the record format (it is open source) but not the per-run token,
    # and it cannot reach the harness's stdout: every attempt below fails or is ignored.
    code = ("import os, json, glob\n"
            "rec = json.dumps({'test': 0, 'timed_out': False, 'exit': 0, 'signal': None, 'stdout': '2\\n'})\n"
            "for path in ['/proc/%d/fd/1' % os.getppid(), '/proc/1/fd/1'] + glob.glob('/proc/*/fd/1'):\n"
            "    try:\n"
            "        with open(path, 'w') as f:\n"
            "            f.write('0' * 32 + ' ' + rec + '\\n')\n"
            "    except OSError:\n"
            "        pass\n"
            "print(1)\n")
    reply = await verify(service, row(code, ["1\n"], ["2"]))
    assert reply["verdicts"] == ["WA"] and reply["reward"] == 0.0


async def test_background_thread_output_is_kept(service):
    code = ("import threading, sys\nsys.setrecursionlimit(10000)\nthreading.stack_size(1 << 26)\n"
            "def main():\n    print(int(input()) * 3)\nthreading.Thread(target=main).start()\n")
    reply = await verify(service, row(code, ["4\n"], ["12"]))
    assert reply["verdicts"] == ["AC"], reply["tests"]


async def test_malformed_rows_are_rejected(service):
    bad = row("print(1)", ["1"], [])
    status, reply = await service.verify(bad)
    assert status == 422 and "error" in reply
    bad_json = row("def f(x):\n    return x", ["not json"], ["1"], "f")
    status, reply = await service.verify(bad_json)
    assert status == 200 and reply["_ng_failure_class"] == "verifier_error"


async def test_sandbox_failure_is_a_failure_class():
    env = registry.instantiate("code", overrides={"python": "/nonexistent/python3"})
    svc = EnvService(env)
    await svc.start()
    try:
        status, reply = await svc.verify(row("print(1)", ["1"], ["1"]))
        assert status == 200 and reply["_ng_failure_class"] == "sandbox_error" and reply["reward"] == 0.0
        assert reply["instance_config"]["mask_sample"] is True
    finally:
        await svc.stop()
