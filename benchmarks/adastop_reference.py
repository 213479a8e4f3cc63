"""Reference: AdaStop (the `adastop` package, Mathieu et al., TMLR 2024) on scenarios like the simulation
suite's, in AdaStop's own protocol: each of K looks adds n fresh seeds' final scores (noise sd 1) to every
condition still in an undecided comparison; all pairs; alpha 0.05. Prints how often the best condition is
declared worse, how often equal conditions get any difference, and the seeds used against K * n per
condition. Not the campaign's protocol (there a look re-measures the same seeds at a later rung), so
compare the guarantee and the order of magnitude, not the figures one for one.

Needs the test-only extra: `pip install -e '.[stats-check]'`, then
`python benchmarks/adastop_reference.py CAMPAIGNS` (100 campaigns: about 15 minutes on a loaded core).
"""
import json
import sys

import numpy as np
from adastop import MultipleAgentsComparator


def run(means, n, K, alpha, campaigns, B, seed):  # noqa: N803  (AdaStop's names)
    rng = np.random.default_rng(seed)
    names = list(means)
    best_false, any_reject, seeds = 0, 0, 0
    for _ in range(campaigns):
        comp = MultipleAgentsComparator(n=n, K=K, B=B, alpha=alpha, seed=int(rng.integers(2**31)))
        evals = {a: np.array([]) for a in names}
        for k in range(K):
            for i, a in enumerate(names):
                if k == 0 or i in np.asarray(comp.current_comparisons).ravel():
                    evals[a] = np.concatenate([evals[a], means[a] + rng.normal(size=n)])
            comp.partial_compare(evals, verbose=False)
            if comp.is_finished:
                break
        dec = comp.decisions
        pairs = comp.comparisons
        bi = names.index(max(names, key=lambda a: means[a]))
        for (i, j) in pairs:
            d = dec[str(np.array([i, j]))]
            if (i == bi and d == "smaller") or (j == bi and d == "larger"):
                best_false += 1
                break
        any_reject += any(v in ("larger", "smaller") for v in dec.values()) and len(set(means.values())) == 1
        seeds += sum(len(v) for v in evals.values())
    return {"best_wrongly_smaller": best_false / campaigns, "equal_any_rejected": any_reject / campaigns,
            "mean_seeds": seeds / campaigns, "grid_seeds": len(names) * n * K}

out = {}
for name, means, n in [("4 sd worse", {"a": 0.0, "b": -4.0, "c": -4.0, "d": -4.0}, 5),
                       ("2 sd worse", {"a": 0.0, "b": -2.0, "c": -2.0, "d": -2.0}, 5),
                       ("equal, 4 conditions", dict.fromkeys("abcd", 0.0), 5),
                       ("close race", {"a": 0.0, "b": -0.5, "c": -0.5, "d": -4.0}, 5)]:
    out[name] = run(means, n, 3, 0.05, int(sys.argv[1]), 2000, 0)
    print(name, out[name], flush=True)
print(json.dumps(out, indent=1))
