"""Grapheme-to-phoneme front ends, one module per family (espeak-ng, OpenJTalk for Japanese, misaki), behind one G2P router."""
