"""The texts every benchmark speaks. Fixed, so figures from different runs are comparable."""

from __future__ import annotations

#: The time-to-first-audio paragraph: exactly 267 characters in 4 sentences, the length and shape of the
#: paragraph in AWS's bidirectional-streaming write-up (our own words). Its first sentence has a comma
#: after 8 words, so a clause-level first segment exists.
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

#: 24 short utterances (one or two sentences each) for the payload table.
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

#: Requests the throughput clients cycle through (two sentences each, one server segment each when the
#: first segment is not cut early).
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


#: What the speech-quality benchmark reads whole and streamed: sentences with and without an early clause
#: mark, numbers, money and decimals (each within one model call).
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


#: What the languages benchmark's recogniser hears each English G2P read: plain sentences, and (below)
#: numbers, money, dates and abbreviations.
PLAIN_SENTENCES = (
    "The garden looks lovely after the rain.",
    "Please remember to lock the back door tonight.",
    "She walked slowly along the quiet river bank.",
    "We should leave early to avoid the traffic.",
    "My brother fixed the broken window last week.",
    "The children are playing football in the park.",
    "Could you send me the report before lunch?",
    "The library closes late on most weekdays.",
    "He poured a cup of tea and sat by the fire.",
    "The mountain road was closed because of snow.",
    "They painted the kitchen a warm shade of yellow.",
    "Our neighbours are moving to a smaller house.",
    "The teacher asked everyone to read the first chapter.",
    "A small boat drifted across the calm lake.",
    "I lost my keys somewhere in the garden.",
    "The doctor said the results look good.",
    "We watched the sun go down behind the hills.",
    "Please turn off the lights when you leave.",
    "The market sells fresh fish every morning.",
    "My sister plays the piano beautifully.",
)
WRITTEN_SENTENCES = (
    "The invoice lists 1,250 units at $12.50 each.",
    "Dr. Smith will see you at 3:30 pm on March 5th.",
    "Prices rose 7.5% in 2023, to $4.2 million.",
    "Call 555-123-4567 before Jan. 10th, 2025.",
    "The parcel weighs 12 kg and costs £30.",
    "Our office is at 221 Baker St., on the 2nd floor.",
    "The meeting moved to 2024-06-14 at 9am.",
    "It was about 25°C, e.g. warm for May.",
    "The flight leaves at 6:45 am from gate 12.",
    "She paid $1,999 for a 65 inch screen.",
    "Mr. Brown was born on 7/4/1976.",
    "The car drove 120 km in 1.5 hours.",
    "Only 3% of the 4,000 tickets are left.",
    "Prof. Lee wrote 2 books, i.e. a pair.",
    "The 3rd race starts at 10:15.",
    "We saved €250 on the 14th of June.",
)


def check_paragraph() -> None:
    """Raise when the paragraph is not what the benchmark claims (267 characters, 4 sentences)."""
    if len(PARAGRAPH) != PARAGRAPH_CHARS:
        raise AssertionError(f"the TTFA paragraph has {len(PARAGRAPH)} characters, not {PARAGRAPH_CHARS}")
    if " ".join(SENTENCES) != PARAGRAPH:
        raise AssertionError("SENTENCES do not join to PARAGRAPH")
    if len(CLIPS) != 24:
        raise AssertionError(f"{len(CLIPS)} payload clips, not 24")
