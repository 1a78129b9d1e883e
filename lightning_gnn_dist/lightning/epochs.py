"""The next epoch's first batches, begun while the current epoch's last step trains.

Lightning takes two batches before an epoch's first step; a prefetching loader
(:meth:`~lightning_gnn_dist.loaders.stepping.SteppedLoader.start_next_epoch`) can make them in
its thread while the last step of the epoch before trains (issue 31: the step waited ~25 ms
for them at every epoch start, 4 % of an epoch at R-MAT scale 16). ``GNNStrategy`` calls
:func:`begin_next_epoch` as each training step starts and :func:`finish_begun_epoch` at
teardown.
"""

from __future__ import annotations

__all__ = ["another_epoch_follows", "begin_next_epoch", "finish_begun_epoch"]


def another_epoch_follows(trainer) -> bool:
    """Whether the fit loop runs another epoch after this one, by what every rank knows alike
    (``max_epochs``, ``max_steps``; not ``should_stop``, which a callback may set on one rank
    first). An epoch begun for nothing is finished at teardown."""
    max_epochs, max_steps = trainer.max_epochs, trainer.max_steps
    if max_epochs is not None and 0 <= max_epochs <= trainer.current_epoch + 1:
        return False
    return max_steps is None or max_steps < 0 or trainer.global_step + 1 < max_steps


def begin_next_epoch(trainer, batch_idx: int) -> None:
    """At the epoch's last training step, when another epoch follows, have a prefetching
    training loader begin the next epoch's batches (collective: every rank decides alike)."""
    if batch_idx == trainer.num_training_batches - 1 and another_epoch_follows(trainer):
        start = getattr(trainer.train_dataloader, "start_next_epoch", None)
        if start is not None:
            start()


def finish_begun_epoch(trainer) -> None:
    """Finish the batches of an epoch :func:`begin_next_epoch` began that will not run."""
    finish = getattr(getattr(trainer, "train_dataloader", None), "finish_early", None)
    if finish is not None:
        finish()
