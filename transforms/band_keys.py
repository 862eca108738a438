"""The dedup pass's band keys: every document's key of every LSH band, at once in NumPy.

`transforms.dedup.band_keys` hashes one document's bands with BLAKE2b (about 10 µs a band in
Python: a third of the pass once the signatures got fast). The job needs only keys that are
equal exactly when a band's values are, so `band_key_matrix` folds each band's ``rows``
values through SplitMix64's finalizer from two seeds (128 bits), for a whole chunk's
signatures in a few NumPy passes. Candidates are those of ``band_keys``: bands whose values
differ share a key with a probability of about 2**-128, and only within one band.
"""

from __future__ import annotations

import numpy as np

from transforms.dedup import DedupSpec

__all__ = ["band_key_matrix"]

_MIX_1, _MIX_2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_SEEDS = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xD1B54A32D192ED03))


def _mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer (a bijection of 64-bit words), in place."""
    z ^= z >> np.uint64(30)
    z *= _MIX_1
    z ^= z >> np.uint64(27)
    z *= _MIX_2
    z ^= z >> np.uint64(31)
    return z


def band_key_matrix(sigs: np.ndarray, spec: DedupSpec) -> np.ndarray:
    """Every document's key of every band at once: ``(n, bands)`` 16-byte keys (dtype
    ``V16``), equal whenever the band's ``rows`` MinHash values are.

    The job's form of `transforms.dedup.band_keys` (a BLAKE2b per band per document, 10 µs
    each in Python): two 64-bit folds of the band's values through SplitMix64's finalizer,
    from two seeds and the band's index, computed for all documents and bands in NumPy.
    Bands whose values differ share a key with a probability of about 2**-128, and only
    within one band (the index is folded in): the candidates are those of ``band_keys``.
    """
    n = len(sigs)
    values = np.ascontiguousarray(sigs, dtype=np.uint64).reshape(n, spec.bands, spec.rows)
    out = np.empty((n, spec.bands, 2), np.uint64)
    with np.errstate(over="ignore"):
        for half, seed in enumerate(_SEEDS):
            h = np.broadcast_to(_mix(np.arange(spec.bands, dtype=np.uint64) ^ seed),
                                (n, spec.bands)).copy()
            for row in range(spec.rows):
                h ^= values[:, :, row]
                _mix(h)
                h += seed
            out[:, :, half] = h
    return out.view("V16").reshape(n, spec.bands)
