"""Hardware profiles (TOML data) and the roofline `CostModel` built on them."""

from specscope.hw_profiles.cost import CostModel, StepCost
from specscope.hw_profiles.profile import (
    HardwareProfile,
    MeasuredTable,
    list_profiles,
    load_profile,
)

__all__ = [
    "CostModel",
    "HardwareProfile",
    "MeasuredTable",
    "StepCost",
    "list_profiles",
    "load_profile",
]
