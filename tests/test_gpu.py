"""The GPU-memory precheck. This host has no GPU: the precheck passes here, and its reading of
nvidia-smi's CSV is checked on the output format the H200 host prints."""

from __future__ import annotations

from specwatch.engine import gpu

# `nvidia-smi --query-gpu=index,name,memory.total,memory.used --format=csv,noheader,nounits`
H200 = "0, NVIDIA H200, 143771, 1\n1, NVIDIA H200, 143771, 131072\n"


def test_free_memory_and_the_arms_utilization() -> None:
    idle, busy = gpu.parse_gpus(H200)
    assert (idle.index, idle.name, idle.free_mib) == (0, "NVIDIA H200", 143770.0)
    assert busy.free_mib == 143771 - 131072 and busy.free_mib < 0.9 * busy.total_mib
    assert gpu.utilization(["--gpu-memory-utilization", "0.5"]) == 0.5
    assert gpu.utilization(["--gpu-memory-utilization=0.3", "--max-num-seqs", "8"]) == 0.3
    assert gpu.utilization([]) == gpu.DEFAULT_UTILIZATION


def test_no_gpu_means_no_refusal() -> None:
    assert gpu.precheck([]) is None
