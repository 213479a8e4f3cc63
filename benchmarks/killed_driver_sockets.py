"""What a SIGKILLed campaign driver leaves listening (issue 15): measured, not assumed.

Starts a driver in its own process session with its own Ray temp dir, connecting to Ray as the campaign
driver does (`ray.init(address="local", namespace="retrain-ray", log_to_driver=False)`), lists the
listening TCP sockets of its processes (the session, plus anything naming the temp dir), SIGKILLs the
driver process alone, and lists them again after 0, 2, 5, 10, 20, 30, 60 and 90 s, until none is
left. Then kills what is left of that session (nothing else).

    .venv/bin/python benchmarks/killed_driver_sockets.py
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from campaign_helpers import (  # noqa: E402
    PYTHON,
    isolated_env,
    kill_owned,
    owned_pids,
    remove_temp_dir,
    short_temp_dir,
    start,
    wait_for,
)

DRIVER = ("import ray, time; ray.init(address='local', namespace='retrain-ray', log_to_driver=False); "
          "print('ray up', flush=True); time.sleep(900)")
CHECKS_S = (0, 2, 5, 10, 20, 30, 60, 90)


def listening(pids: list[int]) -> list[str]:
    """'name ip:port' of every listening TCP socket of `pids`."""
    import psutil

    found = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            name = proc.name()
            conns = proc.net_connections(kind="tcp")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        found += [f"{name} {c.laddr.ip}:{c.laddr.port}" for c in conns if c.status == psutil.CONN_LISTEN]
    return sorted(found)


def _line(label: str, pids: list[int], socks: list[str]) -> str:
    public = sum(not s.split()[-1].startswith(("127.", "::1:")) for s in socks)
    return f"{label:>12}: {len(pids)} processes, {len(socks)} listening sockets ({public} not on loopback)"


def main() -> int:
    ray_tmp = short_temp_dir("rrs")
    log = ray_tmp.parent / f"{ray_tmp.name}.log"
    driver = start([PYTHON, "-c", DRIVER], env=isolated_env(ray_tmp), log=log)
    try:
        wait_for(lambda: "ray up" in log.read_text() or driver.poll() is not None, timeout_s=180, what="Ray")
        time.sleep(3)  # the dashboard agent and workers bind shortly after init returns
        pids = owned_pids(driver.pid, ray_tmp)
        socks = listening(pids)
        print(_line("driver alive", pids, socks))
        for sock in socks:
            print(f"{'':>14}{sock}")
        os.kill(driver.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        for at in CHECKS_S:
            time.sleep(max(0.0, killed_at + at - time.monotonic()))
            pids = owned_pids(driver.pid, ray_tmp)
            socks = listening(pids)
            print(_line(f"killed +{at} s", pids, socks), flush=True)
            if not pids:
                break
            if at in (5, 60):
                for sock in socks:
                    print(f"{'':>14}{sock}")
    finally:
        left = kill_owned(driver.pid, ray_tmp)
        print(f"cleanup: SIGKILLed {len(left)} leftover processes of that session")
        remove_temp_dir(ray_tmp)
        log.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
