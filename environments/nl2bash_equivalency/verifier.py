"""nl2bash_equivalency: a generated bash command judged functionally equivalent to the gold
command by an LLM (NeMo-Gym's ``nl2bash-equivalency`` config of its ``equivalence_llm_judge``
server). The same flow as ``equivalence_llm_judge`` (the shared library environments/llm_equivalence/);
only the defaults differ: the bash-grader prompt, the ``Answer: ```sh ...````
extraction, and the swap check on (both orders must say equivalent)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from environments.llm_equivalence.environment import EquivalenceConfig, EquivalenceJudgeEnvironment

# NeMo-Gym's configs/nl2bash-equivalency.yaml judge_prompt_template (literal braces doubled for str.format).
NL2BASH_PROMPT = """===== System role =====
You are a meticulous Bash command grader.

Task: Determine if the candidate's generated bash command is functionally equivalent to the GOLD command for the given natural language query.

Consider:
1. Does it achieve the same outcome?
2. Are there only minor syntactic differences that don't affect functionality?
3. Are both commands correct interpretations of the natural language query?

Rules:
- Treat GOLD as authoritative for what counts as correct.
- Multi-part: all essential parts must match for “equivalent”; otherwise they are not equivalent.
- Be concise. Do NOT reveal or rewrite the GOLD.

Show your reason why they are equivalent or not equivalent first and then provide the output.

Output (at the end after double newlines):
- If equivalent: [[A=B]] they are equivalent
- If not equivalent: [[A!=B]] they are not equivalent

===== Example 1 (equivalent) =====
QUESTION:
Add "execute" to the permissions of all directories in the home directory tree

GOLD:
find ~ -type d -exec chmod +x {{}} \\\\;

CANDIDATE:
find "$HOME" -type d -exec chmod +x {{}} \\\\;

Both commands achieve the same outcome by recursively finding all directories in the home directory and adding execute permissions, with only minor syntactic differences in how the home directory is referenced (~ vs $HOME) and quoting style.

[[A=B]] they are equivalent

===== Example 2 (not equivalent) =====
QUESTION:
Add read and execute permission to command "node"

GOLD:
sudo chmod +rx $(which node)

CANDIDATE:
chmod +rx node

Candidate's command operates on a 'node' file in the current directory without sudo, whereas the GOLD modifies the actual node executable found via which and uses sudo.

[[A!=B]] they are not equivalent

===== Inputs =====
QUESTION:
{question}

GOLD:
{expected_answer}

CANDIDATE:
{generated_answer}"""

# The command inside the last "Answer: ```sh ... ```" block.
ANSWER_BLOCK = r"Answer:\s*```(?:\w+)?\s*([\s\S]*?)\s*```(?=[\s\S]*$)"


class Nl2BashConfig(EquivalenceConfig):
    judge_prompt_template: str = Field(NL2BASH_PROMPT, description="The bash-grader prompt (NeMo-Gym's); "
                                       "placeholders {question} {expected_answer} {generated_answer}.")
    response_extract_regex: str | None = Field(ANSWER_BLOCK, description="Cuts the command out of the response.")
    check_twice_swap: bool = Field(True, description="After 'equal', judge again with the commands swapped.")
    use_per_record_regex: bool = Field(False, description="nl2bash rows carry no output_regex.")


class Nl2BashEquivalency(EquivalenceJudgeEnvironment):
    name = "nl2bash_equivalency"
    domain = "agent"
    summary = "Bash command vs gold command, judged functionally equivalent by an LLM in both orders"
    agent_names: ClassVar[tuple[str, ...]] = ("nl2bash_equivalency_simple_agent", "nl2bash-equivalency_simple_agent")
    Config = Nl2BashConfig
