"""A deterministic set of English utterances: the check texts of every text import (finish.check_texts) and the
evaluation set of the pipeline's intent model (scripts/text/build.py, scripts/variants.py).

No labelled data ships offline with the intent head, so the checks compare predictions, not accuracy: a served graph
against the framework it came from, and a fallback against its primary. The set spans the CLINC150 domains
(banking, credit cards, kitchen, home, auto, travel, utility, work, small talk, meta) plus the package's RAG-routing
intents and some out-of-scope chatter, and varies case, punctuation, politeness wrappers and length so that tokenised
lengths range from a handful of tokens to several dozen.
"""
from __future__ import annotations

import random

BASE: tuple[str, ...] = (
    # banking
    "how much money do i have in my checking account",
    "transfer 200 dollars from savings to checking",
    "when is my electricity bill due",
    "pay my phone bill with my debit card",
    "freeze my bank account right now",
    "i think someone used my card without permission",
    "what's the interest rate on my savings account",
    "what is the routing number for my bank",
    "what's the minimum payment on my credit card this month",
    "show me my recent transactions",
    "how much did i spend on groceries last week",
    "why is my account blocked",
    "i need to change my pin",
    "order a new book of checks",
    # credit cards
    "what's my credit score",
    "i lost my credit card yesterday",
    "can you raise my credit limit",
    "how many reward points do i have",
    "has my card application been approved yet",
    "why did my card get declined at the store",
    "are there foreign transaction fees on my visa",
    "what is the apr on my mastercard",
    "how do i redeem my credit card rewards",
    "my card is cracked and does not work",
    "how long until my replacement card arrives",
    "when does my card expire",
    "how can i improve my credit score",
    # kitchen and dining
    "give me a recipe for banana bread",
    "book a table for four at an italian restaurant tonight",
    "are the reviews good for the sushi place downtown",
    "how many calories are in a slice of pizza",
    "what are the ingredients in a caesar salad",
    "how long should i bake chicken breasts",
    "what should i make for dinner tonight",
    "how long does cooked rice last in the fridge",
    "what can i use instead of eggs in pancakes",
    "cancel my dinner reservation at olive garden",
    "is the thai restaurant busy right now",
    "does the steakhouse take reservations",
    "suggest a good mexican restaurant nearby",
    # home
    "add milk to my shopping list",
    "what's on my to do list",
    "remind me to call mom at six",
    "what do i have on my calendar tomorrow",
    "turn off the lights in the living room",
    "order more paper towels",
    "play some jazz music",
    # auto and commute
    "how is the traffic on the way to work",
    "give me directions to the nearest gas station",
    "how much gas is left in my car",
    "what kind of gas does my car take",
    "how far is it from boston to new york",
    "get me an uber to the airport",
    "what mpg does my car get on the highway",
    "when should i get my oil changed",
    "how do i change the oil myself",
    "how do you jump start a car",
    "how do i change a flat tire",
    "what should my tire pressure be",
    "schedule a maintenance appointment for my car",
    "when was my car last serviced",
    # travel
    "book a flight from chicago to denver on friday",
    "find me a hotel in paris for three nights",
    "i need to rent a car in miami next week",
    "where should i go on vacation this summer",
    "are there any travel alerts for mexico",
    "let my bank know i'm traveling to japan",
    "what is the carry on size limit for delta",
    "what time zone is london in",
    "which vaccines do i need before going to brazil",
    "how do you say thank you in french",
    "is my flight to seattle on time",
    "do i need a visa to visit india",
    "the airline lost my luggage",
    "what plug adapter do i need in germany",
    "what's the exchange rate between dollars and euros",
    # utility
    "what time is it",
    "set an alarm for 7 am",
    "share my location with my wife",
    "help me find my phone",
    "what's the weather like in dallas today",
    "send a text to john saying i'm running late",
    "how do you spell necessary",
    "call my dentist",
    "set a timer for ten minutes",
    "what's today's date",
    "what is 15 percent of 80",
    "how many ounces are in a cup",
    "flip a coin for me",
    "roll a six sided die",
    "what does the word ubiquitous mean",
    # work
    "set up direct deposit for my paycheck",
    "i'd like to request next friday off",
    "when do i need to file my taxes",
    "when is the next payday",
    "where can i find my w2 form",
    "how many vacation days do i have left",
    "has my time off request been approved",
    "when is the next company holiday",
    "what health insurance plan am i on",
    "i want to change my insurance plan",
    "schedule a meeting with the marketing team at 3",
    "how many days off have i used this year",
    "what meetings do i have today",
    "how do i roll over my 401k",
    "what is my annual income",
    # small talk
    "hello there",
    "goodbye, talk to you later",
    "tell me a joke",
    "where are you from",
    "how old are you",
    "what is your name",
    "who created you",
    "thank you so much",
    "what kinds of things can i ask you",
    "what do you like to do for fun",
    "do you have any pets",
    "are you a real person or a robot",
    "what is the meaning of life",
    "who is your boss",
    "tell me a fun fact",
    # meta
    "i want to call you jarvis from now on",
    "call me captain from now on",
    "cancel that",
    "what name do you have for me",
    "reset all settings to factory default",
    "switch to whisper mode",
    "can you repeat that",
    "no, that is wrong",
    "yes, that's correct",
    "maybe, i'm not sure",
    "change your language to spanish",
    "use a british accent",
    "turn the volume up",
    "speak more slowly",
    "sync with my phone",
    # RAG routing meta-intents
    "that answer didn't help, can you explain it again",
    "let me speak to a real human agent",
    "this is unacceptable, escalate this to your manager",
    "i'm really frustrated with this terrible service",
    "urgent: someone is making charges on my account right now",
    "i have a general question about my order",
    # out of scope chatter
    "how many legs does a spider have",
    "who won the world series in 1998",
    "what's the best way to learn the guitar",
    "can penguins fly",
)

PREFIXES = ("", "", "hey, ", "please ", "can you tell me ", "quick question: ", "excuse me, ", "ok so ")
SUFFIXES = ("", "", "?", "!", " please", ".", " thanks", " asap")
CONTEXT = (
    "I was wondering about something and wanted to ask before I forget, ",
    "Sorry to bother you again, I tried the app and the website and neither one helped, so ",
    "My friend said you could help with this kind of thing and I am in a bit of a hurry today because of work, so ",
)


def _vary(text: str, rng: random.Random) -> str:
    out = rng.choice(PREFIXES) + text + rng.choice(SUFFIXES)
    style = rng.random()
    if style < 0.2:
        out = out.upper()
    elif style < 0.5:
        out = out[0].upper() + out[1:]
    elif style < 0.6:
        out = out.title()
    if rng.random() < 0.15:
        out = rng.choice(CONTEXT) + out
    return out


def evaluation_utterances(n: int = 260, seed: int = 0) -> list[str]:
    """Every base utterance once as written, then seeded variations until `n` distinct texts."""
    rng = random.Random(seed)
    texts = list(BASE)
    seen = set(texts)
    while len(texts) < n:
        cand = _vary(rng.choice(BASE), rng)
        if cand not in seen:
            seen.add(cand)
            texts.append(cand)
    return texts[:n]


def parity_texts() -> dict[str, list[str]]:
    """Texts of increasing token length for the parity cases (short ~8, medium ~32, long >=128 tokens)."""
    long_text = " ".join(BASE[i] for i in range(0, 60, 3))
    medium = "I was wondering whether you could check my account balance and also tell me when the bill is due"
    return {"short": list(BASE[:64]), "medium": [medium] + list(BASE[64:96]), "long": [long_text] + list(BASE[96:])}
