"""A TRL whose internals moved fails at construction, naming its version and the hook it lacks.

ScoreCenteringGRPOTrainer overrides GRPOTrainer methods and reads attributes GRPOTrainer.__init__ sets (trl 1.16.0,
`scrl_min.trl.TRL_METHODS`, `TRL_ATTRIBUTES`). A TRL without one of them would otherwise fail mid-training with an
AttributeError, or, worse, silently skip an override that no longer exists. Here each kind of hook is taken away from
the installed TRL (monkeypatch) and the construction must refuse.
"""
import re

import pytest

pytest.importorskip("trl")

import trl  # noqa: E402
from trl import GRPOTrainer  # noqa: E402

import scrl_min  # noqa: E402
from scrl_min.trl import TRL_ATTRIBUTES, TRL_METHODS, _missing_trl_hooks, task_trainer  # noqa: E402

CONFIG = dict(use_cpu=True, per_device_train_batch_size=4, num_generations=2, max_completion_length=4)


def test_the_pinned_trl_has_every_hook(tmp_path):
    tr = task_trainer(tmp_path, n_prompts=4, **CONFIG)
    assert _missing_trl_hooks(tr) == [] and all(hasattr(GRPOTrainer, m) for m in TRL_METHODS)


@pytest.mark.parametrize("hook", ["method", "parameter", "attribute"])
def test_a_trl_whose_internals_moved_fails_at_construction(tmp_path, monkeypatch, hook):
    if hook == "method":  # a GRPOTrainer method the subclass overrides, gone
        monkeypatch.delattr(GRPOTrainer, "_generate_and_score_completions")
        says = "GRPOTrainer._generate_and_score_completions(inputs)"
    elif hook == "parameter":  # the generation hook with a parameter renamed
        monkeypatch.setattr(GRPOTrainer, "_generate_single_turn",
                            lambda self, prompts, images, multimodal_fields, num_generations: None)
        says = "GRPOTrainer._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations)"
    else:  # an attribute GRPOTrainer.__init__ no longer sets
        assert "vllm_importance_sampling_mode" in TRL_ATTRIBUTES
        init = GRPOTrainer.__init__

        def init_without(self, *a, **kw):
            init(self, *a, **kw)
            del self.vllm_importance_sampling_mode
        monkeypatch.setattr(GRPOTrainer, "__init__", init_without)
        says = "GRPOTrainer attribute self.vllm_importance_sampling_mode"
    with pytest.raises(scrl_min.ScrlError, match=re.escape(f"trl {trl.__version__} does not have: {says}")):
        task_trainer(tmp_path, n_prompts=4, **CONFIG)
