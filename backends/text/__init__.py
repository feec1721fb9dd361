"""Text to segments: normalisation, languages, the lexicon, sentence cuts, the streaming chunker and the planner; g2p/ holds one module per phoneme front end."""
