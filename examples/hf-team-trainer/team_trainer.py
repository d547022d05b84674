"""A team's own ``transformers.Trainer``: what examples/hf-team-trainer holds to the Trainer
pack's gates. Written as a team writes one, with no knowledge of shipgate.

``TeamTrainer.compute_loss`` computes the causal-LM cross-entropy itself, from the logits,
with the label smoothing the arguments ask for (a team does this to add a term, weight
tokens, or log accuracy; here it is the bare loss). The first version averaged each
micro-batch over its own targets (``reduction="mean"``): right without gradient
accumulation, wrong with it, because Trainer treats a model that takes ``**kwargs`` as one
whose loss already divides by the whole window's target count and does not divide by the
number of micro-batches. The fix sums over the micro-batch and divides by
``num_items_in_batch``, the targets of the whole accumulation window that Trainer counts
before the first forward. tests/mutants/compute_loss_bugs.py keeps the first version.

The model gets every input of the batch but the labels: padding-free batches
(DataCollatorWithFlattening) carry ``position_ids`` and no ``attention_mask``, and the model
keeps a row's sequences apart only from those. A version that named the inputs it passed
(``input_ids``, ``attention_mask``) raised KeyError on such a batch; one that passed
``inputs.get("attention_mask")`` trained each row as one long sequence (kept as a mutant).
"""

from __future__ import annotations

import torch
from torch.nn import functional as F  # noqa: N812 - torch's own convention
from transformers import Trainer, default_data_collator

IGNORE = -100  # labels at padding: Hugging Face's ignore index


class TeamTrainer(Trainer):
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        outputs = model(**{k: v for k, v in inputs.items() if k != "labels"})
        logits = outputs.logits[:, :-1]  # position t predicts token t + 1
        targets = inputs["labels"][:, 1:]
        loss_sum = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]),
            targets.reshape(-1),
            ignore_index=IGNORE,
            reduction="sum",
            label_smoothing=self.args.label_smoothing_factor,
        )
        # The whole window's targets when Trainer counted them; this micro-batch's otherwise
        # (then Trainer divides by the number of micro-batches itself).
        count = num_items_in_batch if num_items_in_batch is not None else (targets != IGNORE).sum()
        loss = loss_sum / torch.as_tensor(count, device=loss_sum.device)
        return (loss, outputs) if return_outputs else loss


def build_trainer(model, args, train_dataset, callbacks) -> TeamTrainer:
    """The factory the Trainer pack calls (pyproject.toml, [tool.shipgate-hf-trainer])."""
    return TeamTrainer(
        model=model,
        args=args,
        train_dataset=train_dataset,
        data_collator=default_data_collator,
        callbacks=callbacks,
    )
