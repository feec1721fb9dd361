"""The texts every benchmark speaks. Fixed, so figures from different runs are comparable.

* :data:`PARAGRAPH` — the time-to-first-audio paragraph: exactly 267 characters in 4 sentences,
  the length and shape of the paragraph in AWS's bidirectional-streaming write-up (our own words).
  Its first sentence has a comma after 8 words, so a clause-level first segment exists.
* :data:`CLIPS` — 24 short utterances (one or two sentences each) for the payload table.
* :data:`THROUGHPUT_TEXTS` — requests the throughput clients cycle through (two sentences each,
  one server segment each when the first segment is not cut early).
* :data:`QUALITY_TEXTS` — what the speech-quality benchmark reads whole and streamed: sentences
  with and without an early clause mark, numbers, money and decimals (each within one model call).
"""

from __future__ import annotations

PARAGRAPH = (
    "When you ask a voice assistant a question, the silence before it answers is what you notice most. "
    "Batch synthesis waits for the whole reply before it plays a sound. "
    "Streaming sends each sentence as soon as it is ready. "
    "The first words arrive in well under one second."
)
PARAGRAPH_CHARS = 267

#: The paragraph's sentences, as a streaming sentence chunker would hand them to the TTS client.
SENTENCES = (
    "When you ask a voice assistant a question, the silence before it answers is what you notice most.",
    "Batch synthesis waits for the whole reply before it plays a sound.",
    "Streaming sends each sentence as soon as it is ready.",
    "The first words arrive in well under one second.",
)

CLIPS = (
    "Your table for two is ready.",
    "The train to Boston leaves from platform nine.",
    "Please hold while I check that for you.",
    "It will be sunny this afternoon, with a light breeze.",
    "Your package was delivered at noon.",
    "I have added milk and eggs to your shopping list.",
    "The meeting has moved to three o'clock.",
    "Turn left at the next corner, then keep straight on.",
    "Your balance is forty two dollars.",
    "Sorry, I did not catch that. Could you say it again?",
    "The museum opens at ten in the morning.",
    "Your flight is on time.",
    "I found three restaurants near you.",
    "The oven timer will ring in five minutes.",
    "Good morning! Here is your daily summary.",
    "Traffic is light on the way to work.",
    "The library book is due next Tuesday.",
    "Your password was changed successfully.",
    "It is currently seventy degrees outside.",
    "The pharmacy closes at nine tonight.",
    "I have set an alarm for six thirty.",
    "Your order will arrive tomorrow.",
    "That song is called Blue in Green.",
    "Thanks for calling. Have a great day.",
)

THROUGHPUT_TEXTS = (
    "The committee met on Tuesday to review the budget. Most of the discussion was about travel costs.",
    "A light rain fell over the harbour all morning. By noon the boats had returned to the docks.",
    "Please remember to bring your ticket and a photo card. The doors open one hour before the show.",
    "The new library has a quiet floor for reading. There is also a small cafe near the entrance.",
    "Our support team answers every message within a day. Urgent problems are handled by phone.",
    "The recipe needs two cups of flour and one egg. Bake it for twenty minutes until golden.",
    "The museum is free on the first Sunday of each month. Guided tours leave every hour.",
    "Engineers replaced the old bridge over the river last year. Traffic now moves much faster.",
)


QUALITY_TEXTS = (
    PARAGRAPH,
    "Kokoro is a small text to speech model. It runs well on an ordinary laptop without a graphics card.",
    "We sold 1,250 units, and the invoice lists 1,250 units at $12.50 each, which is more than last year.",
    "The train to the coast leaves from the main station every morning at seven. Tickets cost $4.75 each.",
    "Our support team answers every message within a day; urgent problems are handled by phone.",
    "If the weather holds, we will walk to the lighthouse after lunch and come back along the beach.",
    THROUGHPUT_TEXTS[1],
    "The report shows that revenue rose by 3.5 percent in the second quarter, mostly from new customers.",
)


def check_paragraph() -> None:
    """Raise when the paragraph is not what the benchmark claims (267 characters, 4 sentences)."""
    if len(PARAGRAPH) != PARAGRAPH_CHARS:
        raise AssertionError(f"the TTFA paragraph has {len(PARAGRAPH)} characters, not {PARAGRAPH_CHARS}")
    if " ".join(SENTENCES) != PARAGRAPH:
        raise AssertionError("SENTENCES do not join to PARAGRAPH")
    if len(CLIPS) != 24:
        raise AssertionError(f"{len(CLIPS)} payload clips, not 24")
