"""PlainAdamW (the CPU AdamW without torch.optim's torch._dynamo import) is torch's AdamW bit for bit."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from retrain_ray.backends.local.backend import PlainAdamW, make_adamw


def _params(seed: int) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(shape, generator=gen)) for shape in [(5, 3), (7,), (2, 2, 2)]]


def _run(opt, params, schedule, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    for step, (lr, wd) in enumerate(schedule):
        opt.zero_grad(set_to_none=True)
        for i, p in enumerate(params):
            if (step + i) % 4 != 3:  # now and then a parameter has no gradient (it is skipped, as torch does)
                p.grad = torch.randn(p.shape, generator=gen) * (10.0 ** (i - 1))
        for group in opt.param_groups:
            group["lr"], group["weight_decay"] = lr, wd
        opt.step()


SCHEDULE = [(1e-2, 0.0), (3e-3, 0.1), (1e-3, 0.01), (5e-2, 0.0), (1e-4, 0.5), (2e-2, 0.0)]


@pytest.mark.parametrize("betas, eps", [((0.9, 0.95), 1e-8), ((0.8, 0.999), 1e-6)])
def test_steps_equal_torch_adamw_bitwise(betas, eps):
    mine, theirs = _params(0), _params(0)
    plain = PlainAdamW(mine, lr=0.0, betas=betas, eps=eps, weight_decay=0.0)
    torch_opt = torch.optim.AdamW(theirs, lr=0.0, betas=betas, eps=eps, weight_decay=0.0)
    _run(plain, mine, SCHEDULE, seed=1)
    _run(torch_opt, theirs, SCHEDULE, seed=1)
    for a, b in zip(mine, theirs, strict=True):
        assert torch.equal(a, b)
        assert plain.state[a].keys() == torch_opt.state[b].keys()
        for key in plain.state[a]:
            assert torch.equal(plain.state[a][key], torch_opt.state[b][key]), key


def test_state_dicts_interchange_with_torch_adamw():
    """A checkpoint written by either optimizer resumes in the other to the same weights."""
    mine, theirs = _params(2), _params(2)
    plain = PlainAdamW(mine, lr=0.0, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0)
    torch_opt = torch.optim.AdamW(theirs, lr=0.0, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0)
    _run(plain, mine, SCHEDULE[:3], seed=3)
    _run(torch_opt, theirs, SCHEDULE[:3], seed=3)
    saved_plain, saved_torch = plain.state_dict(), torch_opt.state_dict()
    assert saved_plain["param_groups"] == saved_torch["param_groups"]
    assert saved_plain["state"].keys() == saved_torch["state"].keys()

    into_torch = torch.optim.AdamW([torch.nn.Parameter(p.detach().clone()) for p in mine], lr=0.0)
    into_torch.load_state_dict(saved_plain)
    into_plain = PlainAdamW([torch.nn.Parameter(p.detach().clone()) for p in theirs], lr=0.0, betas=(0.5, 0.5),
                            eps=1.0, weight_decay=0.0)
    into_plain.load_state_dict(saved_torch)
    assert into_plain.param_groups[0]["betas"] == (0.9, 0.95)
    for opt in (into_torch, into_plain, torch_opt):
        _run(opt, opt.param_groups[0]["params"], SCHEDULE[3:], seed=4)
    for a, b, c in zip(into_torch.param_groups[0]["params"], into_plain.param_groups[0]["params"], theirs, strict=True):
        assert torch.equal(a, c) and torch.equal(b, c)


def test_a_state_of_another_shape_is_refused_with_the_reason():
    plain = PlainAdamW(_params(0), lr=0.0, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0)
    other = torch.optim.AdamW(_params(0)[:2], lr=0.0)
    with pytest.raises(ValueError, match="sizes \\[2\\].*3 parameters"):
        plain.load_state_dict(other.state_dict())


def test_cpu_parameters_get_plain_adamw_and_it_imports_no_dynamo():
    assert isinstance(make_adamw(_params(0), betas=(0.9, 0.95), eps=1e-8), PlainAdamW)
    code = ("import sys, torch\nfrom retrain_ray.backends.local.backend import make_adamw\n"
            "p = [torch.nn.Parameter(torch.ones(3))]\nopt = make_adamw(p, betas=(0.9, 0.95), eps=1e-8)\n"
            "p[0].grad = torch.ones(3)\nopt.step()\nopt.zero_grad()\nprint('torch._dynamo' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False"


def test_zero_grad_keeps_only_set_to_none():
    params = _params(0)
    opt = PlainAdamW(params, lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0)
    for p in params:
        p.grad = torch.ones_like(p)
    with pytest.raises(ValueError, match="set_to_none=False"):
        opt.zero_grad(set_to_none=False)
    assert all(p.grad is not None for p in params)
    opt.zero_grad()
    assert all(p.grad is None for p in params)
