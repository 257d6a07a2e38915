"""Multi-token prediction as the drafter (DeepSeek-AI 2024, DeepSeek-V3 Technical Report,
arXiv:2412.19437 §2.2): the target's own MTP layer drafts, as SGLang serves DeepSeek-V3 with
NEXTN and vLLM with method mtp, TensorRT-LLM with its MTP decoding config.

The module is priced as `models.catalogue.mtp_spec` builds it (one decoder layer of the target's
kind with its 2d → d eh_proj, the target's embedding and LM head) where
`Deployment.draft_cost` places it: on the target's devices, expert groups and number formats.
DeepSeek-V3 ships one such layer (`num_nextn_predict_layers` 1) and the engines reuse it for
every drafted level, so a case's tree is the chain (or SGLang's top-k beams) the layer drafts
one forward a level, each level reading the routed experts its batch's tokens touch. The
layer's KV cache is one layer of the target's (latent attention's, for DeepSeek).
"""

from __future__ import annotations

from specscope.errors import InputError
from specscope.hw_profiles import load_profile
from specscope.models.catalogue import mtp_spec
from specscope.names import MTP_DRAFTER
from specscope.systems.base import System, SystemCosts
from specscope.systems.case import Case
from specscope.systems.step import Prediction, pricing, speculative, target_model
from specscope.trace.sources import source_of


def costs(case: Case) -> SystemCosts:
    """The target as the case states it, drafted by its own MTP layer on its devices."""
    target = target_model(case)
    try:
        spec = mtp_spec(target.model)
    except InputError as exc:
        raise case.fail(str(exc)) from None
    draft = case.deployment.draft_cost(load_profile(case.hw), spec)
    return SystemCosts(target, draft, source_of(MTP_DRAFTER))


def predict(case: Case) -> Prediction:
    """The case's tree drafted by the target's MTP layer, one forward per level, verified by
    the target."""
    if not case.tree:
        raise case.fail("system mtp needs a tree (tokens per level: 1,1,1 for three MTP steps)")
    c = costs(case)
    return speculative(case, pricing(case, c.target, c.drafter), c.source, assumptions=[
        f"the target's MTP layer reused for {len(case.tree)} level"
        f"{'s' if len(case.tree) > 1 else ''}, at the target's tp, ep and precision"])


SYSTEM = System("mtp", "DeepSeek-AI 2024, DeepSeek-V3 Technical Report (arXiv:2412.19437), "
                "multi-token prediction served as the drafter", costs, predict, {})
