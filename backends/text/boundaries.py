"""Where a first segment may end between words: the phrase rules of the planner
(:mod:`backends.text.planner` states them for users). :func:`phrase_boundaries` keeps a natural
phrase (before a preposition, a conjunction or a relative word, never inside a noun phrase);
:func:`word_boundaries` serves a short first segment (any word boundary outside a noun phrase and
not after a word that needs what follows it). Pure Python, no state."""

from __future__ import annotations

import re

#: Words that open a phrase of their own: prepositions, conjunctions, relative words. ``of`` and
#: ``to`` are left out: they bind to the word before ("a cup of tea", "want to go").
PHRASE_OPENERS = frozenset(
    "about above across after against along although among around as at because before behind below "
    "beneath beside besides between beyond by despite during except for from if in inside into like near "
    "once onto over past since than that though through throughout toward towards under underneath unless until upon "
    "when whenever where whereas wherever whether which while who whom whose why with within without".split()
)
#: Coordinators: a phrase boundary only when a new clause or noun phrase follows them.
COORDINATORS = frozenset("and or but nor yet so".split())
#: Words that open a clause or a noun phrase (what must follow a coordinator for a cut before it).
CLAUSE_OPENERS = frozenset(
    "i you he she it we they there this that these those the a an my your his her its our their "
    "some many most all each every no".split()
)
#: Words a first segment never ends with: a determiner, possessive or intensifier needs what comes
#: after it (a cut there is inside a noun phrase), and a phrase word needs its object.
BOUND_TO_NEXT = frozenset(
    "a an the my your his her its our their this that these those some any no every each very such "
    "quite rather too so not of to more less much soon well".split()
) | PHRASE_OPENERS | COORDINATORS
_WORD = re.compile(r"\S+")


def _bare(word: str) -> str:
    return word.strip("\"'“”‘’()[]{}«»").lower()


def phrase_boundaries(sentence: str) -> list[int]:
    """Offsets before words where a sentence may be cut without breaking a phrase (see the module
    docstring), in order."""
    words = [(m.start(), _bare(m.group())) for m in _WORD.finditer(sentence)]
    cuts = []
    for i in range(1, len(words) - 1):
        start, word = words[i]
        before, after = words[i - 1][1], words[i + 1][1]
        if before in BOUND_TO_NEXT or not before.isalpha():
            continue
        if word in PHRASE_OPENERS or (word in COORDINATORS and after in CLAUSE_OPENERS):
            cuts.append(start)
    return cuts


#: Words a short first segment never ends with either: subject pronouns, question words and
#: auxiliaries need the verb or clause after them.
NEEDS_WHAT_FOLLOWS = BOUND_TO_NEXT | frozenset(
    "i you he she we they how what who whom whose why where when "
    "am is are was were be been being will would can could shall should may might must do does did "
    "have has had isn't aren't wasn't weren't don't doesn't didn't won't can't couldn't".split()
)


def word_boundaries(sentence: str) -> list[int]:
    """Offsets before words where a sentence may be cut when a short first segment matters more
    than the phrase: after a word that ends in a letter and needs nothing after it (not in
    :data:`NEEDS_WHAT_FOLLOWS`), before any word but ``of``, ``to`` and a coordinator (a cut
    before ``and`` is :func:`phrase_boundaries`' to make)."""
    words = [(m.start(), _bare(m.group()), m.group()) for m in _WORD.finditer(sentence)]
    return [
        start for i, (start, word, _) in enumerate(words[1:], 1)
        if word not in ("of", "to", *COORDINATORS) and words[i - 1][2][-1:].isalpha() and words[i - 1][1] not in NEEDS_WHAT_FOLLOWS
    ]
