"""Attention at inference (chapter 9): serving a trained model fast.

- ``speculative``: speculative decoding, a small draft model proposing tokens that the target
  model verifies in one pass (``speculative_decode``, ``verify_draft``, ``SpeculativeResult``).

Models are passed in, never imported: this package sits below ``attnlab.models``.
"""

from attnlab.inference.speculative import SpeculativeResult, speculative_decode, verify_draft

__all__ = ["SpeculativeResult", "speculative_decode", "verify_draft"]
