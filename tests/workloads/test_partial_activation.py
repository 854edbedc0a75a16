"""The partial allreduce's activations reach every rank although a rank forwards only when it joins
a round, and never while it waits for the round's collective (``workloads.comm.partial``): the
property that lets its progress thread wait in ``MPI_Wait`` instead of polling. Simulated with
messages delivered in random order and several ranks initiating the same round (solo's merged
initiators). The second tree is what makes it hold by construction: rank 0 always hears from the
initiator, and every rank from its parent in rank 0's tree once that parent has joined."""

from __future__ import annotations

import random

import pytest

from workloads.comm.partial import activation_targets, binomial_children


def _joined(size: int, initiators: list[int], targets, rng: random.Random) -> set[int]:
    """Ranks that join the round: each initiator joins at once; every other rank when the first
    activation reaches it; a rank sends only when it joins, to ``targets(rank, initiator)``."""
    joined: dict[int, int] = {}
    in_flight: list[tuple[int, int]] = []   # (destination, initiator)
    pending = list(initiators)
    rng.shuffle(pending)
    while pending or in_flight:
        # an initiator starts, or a message arrives, in random order
        if pending and (not in_flight or rng.random() < 0.3):
            rank = pending.pop()
            if rank in joined:
                continue
            joined[rank] = rank
        else:
            rank, initiator = in_flight.pop(rng.randrange(len(in_flight)))
            if rank in joined:
                continue   # a duplicate: dropped, nothing forwarded
            joined[rank] = initiator
        in_flight += [(t, joined[rank]) for t in targets(rank, joined[rank], size)]
    return set(joined)


@pytest.mark.parametrize("size", [2, 3, 5, 8, 13, 16, 64])
def test_every_rank_joins_whoever_initiates(size):
    rng = random.Random(size)
    for _ in range(400):
        initiators = rng.sample(range(size), rng.randint(1, min(size, 4)))
        assert _joined(size, initiators, activation_targets, rng) == set(range(size))


def test_without_the_initiators_word_to_rank_0_ranks_are_left_out():
    """The control: rank 0's tree reaches everyone only once rank 0 has joined; without the
    initiator's direct message to it (and without the initiator's own tree), a round that rank 0
    did not start never reaches it."""
    rng = random.Random(1)

    def canonical_only(rank, initiator, size):
        return [t for t in binomial_children(rank, 0, size) if t != rank]

    missed = sum(_joined(16, rng.sample(range(1, 16), 2), canonical_only, rng) != set(range(16)) for _ in range(100))
    assert missed == 100
