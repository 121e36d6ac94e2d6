"""vLLM's CUDA IPC weight-transfer backend on `envs model serve`: a trainer process on the same GPU
hands its parameters over as IPC handles (``torch.multiprocessing.reductions.reduce_tensor``, the
payload vLLM's ``rlhf_http_ipc`` example sends), and the server's next tokens are the new weights'.
Skipped where torch sees no GPU (CI has none; these run on a lent card, see docs/model-server.md)."""

from __future__ import annotations

import base64
import pickle

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device visible to torch here")

from servers.model.rl_client import GenerationClient  # noqa: E402
from servers.model.tiny import TinyModelConfig, build_tiny_model, build_tiny_tokenizer  # noqa: E402
from tests.test_model_server import start_model_server, stop  # noqa: E402

TOK = build_tiny_tokenizer()
PROMPT = TOK(TOK.apply_chat_template([{"role": "user", "content": "count to ten"}], tokenize=False,
                                     add_generation_prompt=True), add_special_tokens=False)["input_ids"]


def ipc_update_info(model: torch.nn.Module) -> dict:
    from torch.multiprocessing.reductions import reduce_tensor

    uuid = str(torch.cuda.get_device_properties(0).uuid)
    names, dtypes, shapes, handles = [], [], [], []
    for name, p in model.named_parameters():
        t = p.detach().contiguous()
        names.append(name)
        dtypes.append(str(t.dtype).split(".")[-1])
        shapes.append(list(t.shape))
        handles.append({uuid: reduce_tensor(t)})
    return {"names": names, "dtype_names": dtypes, "shapes": shapes,
            "ipc_handles_pickled": base64.b64encode(pickle.dumps(handles)).decode()}


@pytest.fixture
def ipc_server(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
    proc, info = start_model_server(tmp_path, "tiny", "--device", "cuda", "--dtype", "float32",
                                    "--weight-transfer-config", '{"backend": "ipc"}')
    yield info
    stop(proc)


async def test_ipc_handles_from_a_trainer_on_the_same_gpu_change_the_outputs(ipc_server):
    trainer_model = build_tiny_model(TOK, TinyModelConfig(), 1).to("cuda").eval()
    async with GenerationClient(ipc_server["url"]) as c:
        before = (await c.complete(PROMPT, max_tokens=16, temperature=0, ignore_eos=True))[0]
        await c.init_weight_transfer({})
        await c._call("POST", "/start_weight_update", {})
        await c._call("POST", "/update_weights", {"update_info": ipc_update_info(trainer_model)}, retry=False)
        await c._call("POST", "/finish_weight_update", {"weight_version": "ipc-1"})
        with torch.no_grad():  # the trainer changes its own copy after the call: the server copied it out
            for p in trainer_model.parameters():
                p.zero_()
        after = (await c.complete(PROMPT, max_tokens=16, temperature=0, ignore_eos=True))[0]
        assert await c.weight_version() == "ipc-1" and after.versions == ["ipc-1"] * 16
    reference = build_tiny_model(TOK, TinyModelConfig(), 1).to("cuda").eval()
    ref = reference.generate(torch.tensor([PROMPT], device="cuda"), max_new_tokens=16, do_sample=False,
                             eos_token_id=None, pad_token_id=TOK.pad_token_id,
                             attention_mask=torch.ones(1, len(PROMPT), dtype=torch.long, device="cuda"))
    assert after.token_ids == ref[0, len(PROMPT):].tolist()
    # untrained tiny weights of both seeds may greedily say the same token: their logprobs still differ
    with torch.no_grad():
        logits = reference(torch.tensor([PROMPT + after.token_ids], device="cuda")).logits[0, len(PROMPT) - 1:-1]
    expected = torch.log_softmax(logits.float(), -1).gather(1, torch.tensor(after.token_ids, device="cuda")[:, None])
    assert torch.allclose(torch.tensor(after.logprobs), expected.squeeze(1).cpu(), atol=1e-4)
    assert max(abs(a - b) for a, b in zip(after.logprobs, before.logprobs)) > 1e-3
