"""The experiment file: pydantic models, parsed once, at the edge.

A leaf: parsing imports nothing of the engine, the load generator or the analysis. What needs
their registries (a launcher's, a backend's, a protocol's name, a metric, a corpus) is checked
after parsing, by specwatch.resolve; everything downstream receives a spec that passed both,
so stages never re-check user input.
"""

from specwatch.spec.arms import EARLY_EXIT, KNOWN_METHODS, LOCAL, ArmSpec, HostSpec, RankSpec, SpeculativeSpec, SshSpec
from specwatch.spec.bisect import BisectSpec
from specwatch.spec.design import DesignSpec
from specwatch.spec.experiment import ExperimentSpec
from specwatch.spec.images import ImageSpec
from specwatch.spec.load import (
    MAX_SPEC_BYTES,
    MAX_SPEC_VALUES,
    SpecError,
    format_validation_error,
    is_bisect_file,
    parse_bisect,
    parse_spec,
    parse_stored,
    problem_line,
)
from specwatch.spec.model import MAX_GENERATED_PARAMS, GeneratedModel, ModelSpec
from specwatch.spec.sweep import SweepSpec
from specwatch.spec.verdict import Thresholds, VerdictSpec
from specwatch.spec.workload import RampUpSpec, SamplingSpec, SloSpec, WorkloadSpec, corpus_name

__all__ = [
    "EARLY_EXIT", "KNOWN_METHODS", "LOCAL", "MAX_GENERATED_PARAMS", "MAX_SPEC_BYTES", "MAX_SPEC_VALUES", "ArmSpec",
    "BisectSpec",
    "DesignSpec",
    "ExperimentSpec", "GeneratedModel", "HostSpec", "ImageSpec", "ModelSpec", "RampUpSpec", "RankSpec",
    "SamplingSpec", "SloSpec", "SpecError", "SpeculativeSpec", "SshSpec", "SweepSpec", "Thresholds", "VerdictSpec",
    "WorkloadSpec", "corpus_name", "format_validation_error", "is_bisect_file", "parse_bisect", "parse_spec",
    "parse_stored", "problem_line",
]
