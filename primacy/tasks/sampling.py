"""Random streams and item sets shared by the list tasks: seeded generators, order-free set hashes, held-out sets
that training never draws, and rows redrawn until they avoid them."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch

from primacy.errors import UsageError

# Independent random streams derived from a task's seed; no two ever share a generator state.
TRAIN, HELD_OUT, HASH, TEST_DESIGN = 0, 1, 2, 3
HASH_BITS = 48  # per-token hash values < 2**48, so a sum of up to 2**15 of them fits in int64

Draw = Callable[[int], torch.Tensor]  # rows -> (rows, M) items; a set is the first L columns of a row


def stream_generator(seed: int, stream: int, index: int = 0) -> torch.Generator:
    """A CPU generator for element ``index`` of stream ``stream``, statistically independent of the others."""
    state = np.random.SeedSequence([seed, stream, index]).generate_state(1, np.uint64)[0]
    return torch.Generator().manual_seed(int(state))


def distinct_sets(vocab_size: int, n_items: int, cap: int = 2**62, repeats: bool = False) -> int:
    """The number of distinct study sets of ``n_items`` from ``vocab_size``, C(K, L), or with ``repeats`` the number
    of multisets C(K + L - 1, L); ``cap`` when it is larger (computed without big integers)."""
    total = vocab_size + n_items - 1 if repeats else vocab_size
    log_count = math.lgamma(total + 1) - math.lgamma(n_items + 1) - math.lgamma(total - n_items + 1)
    return math.comb(total, n_items) if log_count < math.log(cap) else cap


def set_hash(items: torch.Tensor, token_hash: torch.Tensor) -> torch.Tensor:
    """Order-independent hash of each row's item (multi)set: (B, L) -> (B,). Equal sets give equal hashes."""
    return token_hash[items].sum(dim=1)


def token_hashes(vocab_size: int, seed: int) -> torch.Tensor:
    """One random 48-bit value per token (K,), the ingredient of ``set_hash``."""
    return torch.randint(0, 2**HASH_BITS, (vocab_size,), generator=stream_generator(seed, HASH))


def draw_distinct(rows: int, n: int, vocab_size: int, generator: torch.Generator) -> torch.Tensor:
    """(rows, n) int64: per row a uniformly random ordered n-subset of range(vocab_size)."""
    keys = torch.rand(rows, vocab_size, generator=generator)  # rows K
    return keys.topk(n, dim=1).indices


def unique_sets(draw: Draw, n_sets: int, n_items: int, token_hash: torch.Tensor, what: str) -> torch.Tensor:
    """``n_sets`` rows of ``draw`` whose sets (first ``n_items`` columns) are pairwise different, each row kept in its
    own random order; ``what`` names the task's sizes in the error raised when they do not hold that many sets."""
    rows = draw(n_sets)
    for _ in range(100):
        hashes = set_hash(rows[:, :n_items], token_hash)
        dup = torch.zeros(n_sets, dtype=torch.bool)
        sorted_hashes, order = hashes.sort(stable=True)
        dup[order[1:]] = sorted_hashes[1:] == sorted_hashes[:-1]  # every repeat after its first occurrence
        if not dup.any():
            return rows
        rows[dup] = draw(int(dup.sum()))
    raise UsageError(f"num_held_out={n_sets} distinct sets could not be drawn from {what}: lower num_held_out or "
                     "raise the vocabulary")


def avoiding(rows: torch.Tensor, draw: Draw, n_items: int, excluded: torch.Tensor | None,
             token_hash: torch.Tensor | None) -> torch.Tensor:
    """``rows`` with every row whose set (first ``n_items`` columns) hashes into ``excluded`` (sorted (S,) int64)
    redrawn by ``draw`` until none does: training never sees a held-out set."""
    if excluded is None or excluded.numel() == 0:
        return rows
    assert token_hash is not None, "excluded sets need the token hash"
    clash = torch.isin(set_hash(rows[:, :n_items], token_hash), excluded)  # B
    while clash.any():
        rows[clash] = draw(int(clash.sum()))
        clash = torch.isin(set_hash(rows[:, :n_items], token_hash), excluded)
    return rows


class HeldOut:
    """A task's held-out sets and what training needs to avoid them: the rows (S, M) that ``draw(rows,
    generator=...)`` gives on the held-out stream of ``seed``, made distinct by ``unique_sets``, and their sorted set
    hashes. Built on first use. ``draw`` must pickle (a module-level function or a ``functools.partial`` of one), so
    that DataLoader workers can be spawned.

    A set is ``n_items`` of ``vocab_size`` tokens, which the task's setting ``setting`` counts (``vocab_size``,
    ``n_keys``), all different or, with ``repeats``, not necessarily; ``what`` names the sizes in the error raised
    when ``n_sets`` distinct sets cannot be drawn (``sizes`` by default)."""

    def __init__(self, draw: Callable[[int, torch.Generator], torch.Tensor], n_sets: int, n_items: int,
                 vocab_size: int, seed: int, what: str | None = None, *, setting: str = "vocab_size",
                 repeats: bool = False) -> None:
        self._draw, self.n_sets, self.n_items, self.vocab_size, self.seed = draw, n_sets, n_items, vocab_size, seed
        self.setting, self.repeats = setting, repeats
        self.what = self.sizes if what is None else what
        self._rows: torch.Tensor | None = None
        self._hashes: torch.Tensor | None = None
        self._token_hash: torch.Tensor | None = None

    @property
    def sizes(self) -> str:
        """The sizes the sets are drawn from, as error messages name them: ``vocab_size=512 and n_items=32``, followed
        by `` with repeats`` when a set may repeat a token."""
        repeats = " with repeats" if self.repeats else ""
        return f"{self.setting}={self.vocab_size} and n_items={self.n_items}{repeats}"

    def check(self, num_test_sets: int, num_val_sets: int) -> None:
        """``check_held_out`` for these sets: they leave training some sets and hold the test and validation sets."""
        available = distinct_sets(self.vocab_size, self.n_items, repeats=self.repeats)
        check_held_out(self.n_sets, num_test_sets, num_val_sets, available, self.sizes)

    def draw(self, rows: int, generator: torch.Generator) -> torch.Tensor:
        """``rows`` fresh rows (rows, M) from ``generator``, held-out sets not avoided yet (``avoided`` does that)."""
        return self._draw(rows, generator=generator)

    @property
    def token_hash(self) -> torch.Tensor:
        if self._token_hash is None:
            self._token_hash = token_hashes(self.vocab_size, self.seed)
        return self._token_hash

    @property
    def rows(self) -> torch.Tensor:
        """The held-out rows (S, M); their first L columns are the sets."""
        if self._rows is None:
            generator = stream_generator(self.seed, HELD_OUT)
            self._rows = unique_sets(lambda n: self.draw(n, generator), self.n_sets, self.n_items, self.token_hash,
                                     self.what)
        return self._rows

    @property
    def hashes(self) -> torch.Tensor:
        """The held-out sets' hashes, sorted (S,)."""
        if self._hashes is None:
            self._hashes = set_hash(self.rows[:, : self.n_items], self.token_hash).sort().values
        return self._hashes

    def avoided(self, rows: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Training ``rows`` with those that drew a held-out set redrawn from ``generator``."""
        return avoiding(rows, lambda n: self.draw(n, generator), self.n_items, self.hashes, self.token_hash)


def check_held_out(num_held_out: int, num_test_sets: int, num_val_sets: int, available: int, what: str) -> None:
    """Held-out sets leave training sets to draw (fewer than the ``available`` distinct sets of ``what``) and hold
    the test and validation sets."""
    if num_held_out >= available:
        raise UsageError(f"num_held_out={num_held_out} is too large: {what} give only {available} distinct sets, and "
                         "training needs some that are not held out")
    if num_test_sets + num_val_sets > num_held_out:
        raise UsageError(f"num_held_out={num_held_out} is too small: it must hold num_test_sets + num_val_sets = "
                         f"{num_test_sets + num_val_sets} sets")


def cyclic_orders(perm: torch.Tensor, sets: torch.Tensor, shifts: torch.Tensor) -> torch.Tensor:
    """The study positions asked at each query position in the cyclic design: query j of a trial of set s with shift
    k asks ``perm[s, (j + k) % L]``, so the L shifts of a set ask every study position at every query position once.

    perm (S, L), sets and shifts (B,) -> (B, L) int64.
    """
    n_items = perm.shape[1]
    col = (torch.arange(n_items)[None, :] + shifts[:, None]) % n_items  # B L
    return perm[sets].gather(1, col)
