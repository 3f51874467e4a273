"""Engines broken on purpose: ``broken_verification``, the wrong draft-verification rules the
exactness proof must catch (``seer-lab exactness --every-rule``)."""
