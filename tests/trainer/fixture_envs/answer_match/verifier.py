"""Test fixture: reward 1 when the answer string appears in the model's final text."""

from servers.environment import Environment, Verdict
from servers.wire import RowModel


class AnswerRow(RowModel):
    expected_answer: str


class AnswerMatch(Environment):
    name = "answer_match"
    domain = "test"
    summary = "substring match of expected_answer (trainer test fixture)"
    Row = AnswerRow

    async def verify(self, row, response, session):
        text = response.last_message_text
        return Verdict(reward=1.0 if row.expected_answer in text else 0.0, extras={"extracted_answer": text[-50:]})
