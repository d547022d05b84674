"""The bugs teams write into their own Trainer (C-TEAM-TRAINER mutants), each injected into
team_trainer.py through pytest.MonkeyPatch. `gates audit` runs each bound test with
SHIPGATE_MUTANT=<id>; the test must fail by assertion: tests/test_token_mean.py
(FALSIFY-TEAM-TRAINER-001, -002 and -003).
"""

import torch
from team_trainer import IGNORE, TeamTrainer
from torch.nn import functional as F  # noqa: N812

from gates.mutants import mutant


def _shifted(model, inputs):
    outputs = model(**{k: v for k, v in inputs.items() if k != "labels"})
    logits = outputs.logits[:, :-1]
    return outputs, logits.reshape(-1, logits.shape[-1]), inputs["labels"][:, 1:].reshape(-1)


# ---------------------------------------------------------------- FALSIFY-TEAM-TRAINER-001
@mutant("compute-loss-mean-per-micro-batch")
def _mean_per_micro_batch(patch):
    # The team's first version: each micro-batch averaged over its own targets. Trainer sees
    # a model that takes **kwargs, takes the loss as already divided by the window's target
    # count and sums the k micro-batch means: k times too large, and targets in short
    # micro-batches weigh more.
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        outputs, logits, targets = _shifted(model, inputs)
        loss = F.cross_entropy(
            logits, targets, ignore_index=IGNORE, label_smoothing=self.args.label_smoothing_factor
        )
        return (loss, outputs) if return_outputs else loss

    patch.setattr(TeamTrainer, "compute_loss", compute_loss)


# ---------------------------------------------------------------- FALSIFY-TEAM-TRAINER-002
@mutant("label-smoothing-dropped")
def _label_smoothing_dropped(patch):
    # The override never reads label_smoothing_factor: the run is configured to smooth and
    # trains on the plain cross-entropy.
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        outputs, logits, targets = _shifted(model, inputs)
        loss_sum = F.cross_entropy(logits, targets, ignore_index=IGNORE, reduction="sum")
        count = num_items_in_batch if num_items_in_batch is not None else (targets != IGNORE).sum()
        loss = loss_sum / count
        return (loss, outputs) if return_outputs else loss

    patch.setattr(TeamTrainer, "compute_loss", compute_loss)


@mutant("label-smoothing-averaged-per-micro-batch")
def _smoothing_per_micro_batch(patch):
    # Half a fix: the likelihood term is divided by the window's target count, the smoothing
    # term is averaged over this micro-batch's targets, so it is k times too large and
    # reweighted across micro-batches.
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        outputs, logits, targets = _shifted(model, inputs)
        eps = self.args.label_smoothing_factor
        keep = targets != IGNORE
        log_p = torch.log_softmax(logits[keep], dim=-1)
        nll = -log_p.gather(1, targets[keep, None]).sum() / num_items_in_batch
        smooth = -log_p.mean(dim=-1).mean()
        loss = (1 - eps) * nll + eps * smooth
        return (loss, outputs) if return_outputs else loss

    patch.setattr(TeamTrainer, "compute_loss", compute_loss)


@mutant("last-partial-micro-batch-dropped")
def _last_partial_micro_batch_dropped(patch):
    # Static shapes for torch.compile: the data loader drops the last, shorter micro-batch,
    # so an epoch whose sequences do not divide into micro-batches never trains on its tail
    # (and a run of max_steps steps wraps into the next epoch early).
    get_train_dataloader = TeamTrainer.get_train_dataloader

    def without_partial(self):
        self.args.dataloader_drop_last = True
        return get_train_dataloader(self)

    patch.setattr(TeamTrainer, "get_train_dataloader", without_partial)


# ---------------------------------------------------------------- FALSIFY-TEAM-TRAINER-003
def _loss_of(self, outputs, inputs, num_items_in_batch):
    """TeamTrainer's loss of ``outputs`` (the fixed sum / num_items_in_batch)."""
    logits = outputs.logits[:, :-1]
    targets = inputs["labels"][:, 1:].reshape(-1)
    loss_sum = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]),
        targets,
        ignore_index=IGNORE,
        reduction="sum",
        label_smoothing=self.args.label_smoothing_factor,
    )
    return loss_sum / num_items_in_batch


@mutant("position-ids-dropped")
def _position_ids_dropped(patch):
    # The override names the inputs it passes, with .get so that a batch without an
    # attention mask does not raise: a padding-free row loses its position_ids, so its
    # sequences run on as one (positions continue, each attends to the ones before it).
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        outputs = model(input_ids=inputs["input_ids"], attention_mask=inputs.get("attention_mask"))
        loss = _loss_of(self, outputs, inputs, num_items_in_batch)
        return (loss, outputs) if return_outputs else loss

    patch.setattr(TeamTrainer, "compute_loss", compute_loss)


@mutant("attention-mask-of-ones-added")
def _attention_mask_of_ones(patch):
    # "Every model call gets a mask": a batch without one gets a mask of ones. The model
    # then keeps a padding-free row whole (it separates sequences by position_ids only
    # when no mask is given), so each sequence attends to the ones before it in the row.
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        given = {k: v for k, v in inputs.items() if k != "labels"}
        given.setdefault("attention_mask", torch.ones_like(inputs["input_ids"]))
        outputs = model(**given)
        loss = _loss_of(self, outputs, inputs, num_items_in_batch)
        return (loss, outputs) if return_outputs else loss

    patch.setattr(TeamTrainer, "compute_loss", compute_loss)
