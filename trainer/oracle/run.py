"""The oracle end to end: corpus -> tokenizer -> Kneser-Ney baseline -> the loop -> scores.

    result = run_oracle(seed=0)
    result.ratio                     # ppl_val(tiny Llama) / ppl_val(KN trigram)
    python -m trainer.oracle --seeds 0 1 2 --out oracle.json

The model is trained by trainer.train.loop.train - the loop under test - and nothing here
trains anything itself. The run config is fixed (ORACLE_*): one budget for every seed and every
mutant, chosen once so that a correct loop clears 0.7 with margin on 2 CPU cores within
the contract's 2 minutes for 3 seeds. They are not tuned per seed (the contract's
if_fails: "do not tune hyperparameters to pass").
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

from trainer.config.in_code import config_from_values
from trainer.config.sections import RunConfig
from trainer.model.config import LlamaConfig
from trainer.oracle.data import OracleData, build_oracle_data
from trainer.oracle.examples import PaddedExamples
from trainer.oracle.ngram import KneserNeyTrigram
from trainer.oracle.scorer import model_log_probs, score
from trainer.train.loop import train

RATIO_LIMIT = 0.7  # FALSIFY-TRAIN-LOOP-017: ppl(model) <= 0.7 x ppl(KN trigram)
SEEDS = (0, 1, 2)


def oracle_model(vocab_size: int, longest: int) -> LlamaConfig:
    """C-LLAMA family, 2 layers, hidden 64, 4 heads, 2 KV heads, untied lm_head."""
    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=172,  # ~8/3 x hidden, the Llama ratio
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max(64, longest),
        tie_word_embeddings=False,
    )


def oracle_config(data: OracleData, seed: int) -> RunConfig:
    """The fixed budget: same for every seed and every mutant (in-memory data: no shards,
    no tokenizer on disk; the loop runs it on CPU and writes nothing)."""
    return config_from_values(
        oracle_model(data.tokenizer.vocab_size, data.longest),
        data={"micro_batch": 16, "seq_len": data.longest - 1},  # the longest fills a row
        optimizer={
            "lr": ORACLE_LR,
            "min_lr": ORACLE_LR / 10,
            "beta1": 0.9,
            "beta2": 0.95,
            "eps": 1e-8,
            "weight_decay": 0.1,
            "grad_clip": 1.0,
        },
        training={
            "seed": seed,
            "gradient_accumulation": 1,
            "epochs": ORACLE_EPOCHS,
            "max_steps": ORACLE_STEPS,
            "warmup_steps": ORACLE_WARMUP,
            "eval_interval": ORACLE_STEPS,  # one evaluation at the end; early stopping off
            "early_stopping": False,
            "wrap_around": True,
        },
        monitoring={"log_interval": ORACLE_STEPS},
    )


# Sized on this 2-core CPU: longer or hotter runs memorise the 16 training stems and score
# worse on the held-out ones. These settings measure a worst ratio of 0.61 over seeds 0-2
# (seed 0: 0.56; evidence/C-TRAINING-LOOP/GATE-TRAIN-LOOP-017.json); re-measured for seed
# 0 with only the budget changed, 200 steps at 3e-3 -> 0.99 and 300 steps at 1e-2 -> 2.55.
ORACLE_STEPS = 100
ORACLE_EPOCHS = 4  # 30 steps per epoch at 480 sequences / 16
ORACLE_WARMUP = 10
ORACLE_LR = 3e-3


@dataclass(frozen=True)
class OracleResult:
    seed: int
    model_ppl: float
    kn_ppl: float
    kn_train_ppl: float
    val_targets: int
    steps: int
    final_train_loss: float
    seconds: float

    @property
    def ratio(self) -> float:
        return self.model_ppl / self.kn_ppl

    def to_json(self) -> dict:
        return {**dataclasses.asdict(self), "ratio": self.ratio}


def kn_baseline(data: OracleData) -> KneserNeyTrigram:
    return KneserNeyTrigram.fit(data.train_sequences, vocab_size=data.tokenizer.vocab_size)


def run_oracle(
    seed: int, data: OracleData | None = None, kn: KneserNeyTrigram | None = None
) -> OracleResult:
    started = time.perf_counter()
    data = data or build_oracle_data()
    kn = kn or kn_baseline(data)
    config = oracle_config(data, seed)
    pad, seq_len = data.pad_id, config.data.seq_len
    result = train(
        config,
        PaddedExamples(data.train_sequences, seq_len=seq_len, pad_id=pad),
        PaddedExamples(data.val_sequences, seq_len=seq_len, pad_id=pad),
    )
    model_score = score(model_log_probs(result.model), data.val_sequences)
    kn_score = score(kn.log_probs, data.val_sequences)
    return OracleResult(
        seed=seed,
        model_ppl=model_score.perplexity,
        kn_ppl=kn_score.perplexity,
        kn_train_ppl=score(kn.log_probs, data.train_sequences).perplexity,
        val_targets=model_score.targets,
        steps=result.steps_run,
        final_train_loss=result.losses[-1],
        seconds=time.perf_counter() - started,
    )


def run_seeds(seeds: tuple[int, ...] = SEEDS) -> list[OracleResult]:
    data = build_oracle_data()
    kn = kn_baseline(data)
    return [run_oracle(s, data, kn) for s in seeds]
