"""nl2bash_equivalency: the command extraction and both-orders judging, against a scripted judge over HTTP."""

from __future__ import annotations

from servers.scripted_judge import Rule, ScriptedJudge
from servers.wire import response_from_text

ROW = {"responses_create_params": {"input": [{"role": "user", "content": "User request:\nlist files"}]},
       "expected_answer": "ls"}


async def test_last_answer_block_is_judged_in_both_orders(serve_env):
    judge = ScriptedJudge([Rule(("GOLD:\nls\n", "CANDIDATE:\n<<<RESPONSE", "\nls -1\n<<<END RESPONSE"), "same listing [[A=B]]"),
                           Rule(("GOLD:\n<<<RESPONSE", "\nls -1\n<<<END RESPONSE", "CANDIDATE:\nls"),
                                "[[A=B]] they are equivalent")])
    await judge.start()
    try:
        client, _ = await serve_env("nl2bash_equivalency", judges={"judge": {"base_url": judge.url}})
        text = "Draft: Answer: ```sh\nls -la\n```\nFinal:\nAnswer: ```sh\nls -1\n```"
        reply = await client.verify("nl2bash_equivalency", ROW, response_from_text(text))
        assert reply["extracted_answer"] == "ls -1" and reply["reward"] == 1.0
        assert [e["pass"] for e in reply["judge_evaluations"]] == ["first", "swap"]
        prompts = list(judge.prompts)
        # the candidate is fenced in either slot (servers/judge/untrusted.py), the gold is not
        assert "GOLD:\nls\n\nCANDIDATE:\n<<<RESPONSE " in prompts[0] and "\nls -1\n<<<END RESPONSE " in prompts[0]
        assert "GOLD:\n<<<RESPONSE " in prompts[1] and "<<<END RESPONSE " in prompts[1] and prompts[1].endswith("CANDIDATE:\nls")
        assert "You are a meticulous Bash command grader." in prompts[0]
        assert "QUESTION:\nUser request:\nlist files" in prompts[0]
    finally:
        await judge.stop()


async def test_judge_down_is_judge_error(serve_env):
    judge = ScriptedJudge()
    await judge.start()
    client, _ = await serve_env("nl2bash_equivalency", judges={"judge": {
        "base_url": judge.url, "max_retries": 0, "timeout_s": 1.0}})
    await judge.stop()
    reply = await client.verify("nl2bash_equivalency", ROW, response_from_text("Answer: ```sh\nls\n```"))
    assert reply["_ng_failure_class"] == "judge_error" and reply["instance_config"]["mask_sample"] is True
