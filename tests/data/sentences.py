"""sentences.py - the sentences the encoder (#20) is compared with
sentence-transformers on, and timed on: generated, not stored, the same on
every machine (Python's random is stable across versions for the calls made
here: random(), randrange(), randint(), choice(), shuffle()).

    python3 tests/data/sentences.py [--count 1000] [--seed 20] > sentences.jsonl
    python3 tests/data/sentences.py --bench [--count 1000] [--seed 21] > bench.jsonl

One JSON string a line (what bg-tokenize and tests/tools/st_embed.py read).

The corpus (default): realistic English, one sentence or a paragraph of
several, about 5 to 200 BERT tokens each with log-uniform lengths (as many
of 5 to 10 tokens as of 100 to 200), from a small grammar over everyday
topics; and among them, in places fixed by the seed, about an eighth of
edge cases: the empty string, whitespace only, accents and combining marks,
CJK, kana, Hangul and other scripts, emoji with modifiers and ZWJ
sequences, controls, NUL, invisible format characters, words over 100
characters (the tokenizer's [UNK] limit), numbers, runs of punctuation,
special-token look-alikes, mixed scripts, and texts over 256 and 512
tokens (cut at the model's max_seq_length).

--bench: English only, the lengths drawn the same way (5 to 200 tokens),
from another seed; what the encoder benchmarks send.

Lengths are counted as BERT's pre-tokenizer splits (words and single
punctuation marks); the grammar's words are nearly all whole tokens of a
BERT uncased vocabulary, so that is close to the tokenizer's count.
Python's standard library only.
"""

import argparse
import json
import math
import random
import re
import sys

MIN_TOKENS, MAX_TOKENS = 5, 200

# ------------------------------------------------------------------ grammar

PEOPLE = ("the engineer", "my neighbour", "our teacher", "the doctor", "a young student",
          "the manager", "my sister", "the old farmer", "a tourist", "the pilot", "her uncle",
          "the committee", "the new intern", "a local artist", "the team", "his grandmother",
          "the driver", "everyone in the office", "the researchers", "a small child", "she", "he",
          "we", "they", "the customer", "the chef", "the mayor", "my friend from school")
PLACES = ("the station", "the old library", "the market", "the park near the river",
          "the hospital", "the airport", "a small village in the mountains", "the city centre",
          "the kitchen", "the office", "the beach", "the museum", "the school", "the bakery",
          "the harbour", "the train", "the garden", "the stadium", "the bridge", "the factory")
TIMES = ("yesterday", "last week", "this morning", "every Sunday", "in the evening", "at noon",
         "before dinner", "after the meeting", "during the storm", "in the spring", "on Monday",
         "two years ago", "right now", "early in the morning", "late at night", "today")
TOPICS = {
    "weather": (("rain", "wind", "snow", "sun", "fog", "storm", "heat", "cold air", "clouds"),
                ("was heavy", "came from the north", "stopped suddenly", "lasted all day",
                 "made the roads wet", "kept people inside", "was stronger than expected")),
    "food": (("bread", "soup", "coffee", "tea", "the cake", "rice", "fresh fruit", "cheese",
              "the sauce", "breakfast", "dinner"),
             ("was still warm", "tasted of salt", "needed more time", "smelled wonderful",
              "was ready before six", "was too sweet", "went cold on the table")),
    "tech": (("the server", "the new model", "the network", "the database", "the phone",
              "the laptop", "the update", "the search engine", "the queue", "the batch job",
              "the graphics card", "the request"),
             ("crashed twice", "ran out of memory", "answered in a few milliseconds",
              "needed a restart", "was much faster", "lost the connection", "returned an error",
              "handled every request", "used too much power")),
    "money": (("the price", "the bank", "the market", "the budget", "the rent", "the tax",
               "the company", "the loan", "the shop"),
              ("went up again", "fell by ten percent", "was higher than last year",
               "closed early", "paid the bill", "changed the rules", "stayed the same")),
    "health": (("the patient", "the fever", "the medicine", "the test", "his back",
                "the treatment", "her heart", "the clinic"),
               ("got better slowly", "was negative", "worked after a week", "hurt all night",
                "needed a second opinion", "was closed for the holiday")),
    "sport": (("the match", "the team", "the runner", "the ball", "the game", "the coach",
               "the final", "the player"),
              ("was won in the last minute", "ended in a draw", "broke the record",
               "was cancelled", "trained every day", "lost by two points")),
    "nature": (("the river", "the forest", "the birds", "the old tree", "the lake", "the sea",
                "the mountain", "the flowers", "the cat", "the dog", "the horses"),
               ("was quiet", "grew very fast", "moved to the south", "turned green",
                "slept in the sun", "ran across the field", "was frozen")),
}
VERBS = ("saw", "found", "bought", "visited", "lost", "cleaned", "opened", "painted", "fixed",
         "sold", "closed", "checked", "described", "remembered", "watched", "carried",
         "wrote about", "talked about", "looked for", "waited for", "asked about", "forgot")
OBJECTS = ("the letter", "a red bicycle", "the window", "the report", "an old photograph",
           "the keys", "a map of the city", "the door", "the last train", "a new book",
           "the results", "a broken chair", "the tickets", "the small box", "the plan",
           "the message", "a cup of tea", "the garden gate", "the first chapter")
ADVERBS = ("quickly", "slowly", "carefully", "again", "quietly", "finally", "probably",
           "suddenly", "almost", "really", "also", "never", "often", "still")
CONNECT = ("because", "although", "while", "when", "after", "before", "since", "so", "but",
           "and", "until", "even though")
OPENERS = ("However,", "In the end,", "Of course,", "Meanwhile,", "As a result,",
           "To be honest,", "For example,", "Later,", "Surprisingly,", "Then", "Still,")
QUESTIONS = ("Did you know that", "Why do you think", "Is it true that", "Who told you that",
             "How long has it been since")
NUMBERS = ("two", "three", "four", "five", "ten", "twenty", "a hundred", "several", "many")
RARE = ("unbelievably", "reconsideration", "photosynthesis", "cardiologist", "microservices",
        "tokenization", "backpropagation", "hyperparameters", "bureaucratic", "cryptocurrency")


def _clause(rng):
    k = rng.random()
    if k < 0.35:
        topic = TOPICS[rng.choice(sorted(TOPICS))]
        s = "%s %s" % (rng.choice(topic[0]), rng.choice(topic[1]))
    elif k < 0.75:
        s = "%s %s %s" % (rng.choice(PEOPLE), rng.choice(VERBS), rng.choice(OBJECTS))
        if rng.random() < 0.5:
            s += " at %s" % rng.choice(PLACES)
    else:
        s = "%s %s %s %s" % (rng.choice(PEOPLE), rng.choice(ADVERBS), rng.choice(VERBS),
                             rng.choice(OBJECTS))
    if rng.random() < 0.3:
        s += " " + rng.choice(TIMES)
    if rng.random() < 0.08:
        s += " with %s %s" % (rng.choice(NUMBERS), rng.choice(("friends", "boxes", "questions",
                                                               "people", "dollars", "pages")))
    if rng.random() < 0.05:
        s += " about " + rng.choice(RARE)
    return s


def _sentence(rng):
    s = _clause(rng)
    while rng.random() < 0.4:
        s += (", " if rng.random() < 0.5 else " ") + rng.choice(CONNECT) + " " + _clause(rng)
    r = rng.random()
    if r < 0.12:
        s = rng.choice(QUESTIONS) + " " + s + "?"
    elif r < 0.3:
        s = rng.choice(OPENERS) + " " + s + "."
    elif r < 0.34:
        s = s + "!"
    elif r < 0.38:
        s = '"%s%s," %s said.' % (s[0].upper(), s[1:], rng.choice(PEOPLE))
    elif r < 0.41:
        s = s + " (about %d%% of the time)." % rng.randint(2, 98)
    elif r < 0.44:
        s = s + " at %d:%02d." % (rng.randint(1, 12), rng.choice((0, 15, 30, 45)))
    else:
        s = s + "."
    return s[0].upper() + s[1:]


_SPLIT = re.compile(r"\w+|[^\w\s]", re.UNICODE)


def approx_tokens(text):
    """Words and punctuation marks, as BERT's pre-tokenizer splits them."""
    return len(_SPLIT.findall(text))


def _cut(text, n):
    """The text up to its n-th pre-token, ended with a full stop."""
    out, count = [], 0
    for m in _SPLIT.finditer(text):
        count += 1
        if count > n:
            break
        out.append(m)
    end = out[-1].end() if out else 0
    s = text[:end].rstrip(" ,;:(\"")
    return s if s.endswith((".", "?", "!")) else s + "."


SHORT = ("It rained all night.", "Thanks a lot!", "See you tomorrow.", "The server crashed.",
         "Where is the station?", "Coffee is ready.", "Nobody came.", "That was close!",
         "The shop is closed today.", "Call me later.", "The test passed.", "I missed the bus.",
         "Is it raining?", "Good morning, everyone.", "The queue was empty.")


def english(rng, n_tokens):
    """One sentence, or a paragraph of whole sentences, of about n_tokens
    pre-tokens (within a tenth); the last one cut short only where no whole
    sentence fits."""
    parts, count, misses = [], 0, 0
    slack = max(1, n_tokens // 10)
    while n_tokens - count > slack:
        gap = n_tokens - count
        s = rng.choice(SHORT) if gap <= 8 and rng.random() < 0.6 else _sentence(rng)
        k = approx_tokens(s)
        if count + k <= n_tokens:
            parts.append(s)
            count += k
            continue
        misses += 1
        if misses > 30:
            if gap > 4 or not parts:
                parts.append(_cut(s, max(gap - 1, 1)))
            break
    return " ".join(parts)


def log_uniform(rng, lo=MIN_TOKENS, hi=MAX_TOKENS):
    return int(round(math.exp(rng.random() * (math.log(hi) - math.log(lo)) + math.log(lo))))


# ------------------------------------------------------------------ edge cases

EDGE = [
    "",
    " ",
    "   \t  ",
    "\n",
    "\t\n\r\x0b\x0c ",
    "\u00a0\u2003\u3000",
    "a",
    ".",
    "?!",
    "Hello",
    "  leading and trailing spaces  ",
    "Tabs\tand\nnewlines\r\nin the middle",
    "Café crème brûlée, naïve façade, résumé, jalapeño, Ångström, Øresund, Łódź, Dvořák.",
    "e\u0301te\u0301 cafe\u0301 (combining acute accents after the letter)",
    "a\u0323\u0302 o\u0302\u0323 q\u0307\u0323 (two marks in both orders)",
    "Straße Fußgängerübergänge ẞ İstanbul ı ǅ ﬁ ﬃ",
    "北京是中国的首都。我爱自然语言处理！",
    "日本語のテキスト、ひらがなとカタカナ。東京タワーは高い。",
    "한국어 텍스트입니다. 안녕하세요! 서울특별시",
    "ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ สวัสดีครับ",
    "العربية: مرحبا بالعالم، كيف حالك؟ ١٢٣٤٥",
    "עברית: שָׁלוֹם עוֹלָם",
    "हिन्दी भाषा में पाठ। नमस्ते दुनिया",
    "Русский текст: Привет, мир! Ёлка и ёж.",
    "Ελληνικά: Καλημέρα κόσμε, ΆΈΉΊΌΎΏ.",
    "Emoji 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️ 🇫🇷🇯🇵 #️⃣ 🫠 🥰",
    "😀",
    "🚀🚀🚀🚀🚀🚀🚀🚀🚀🚀",
    "Controls:\x01\x02\x07\x08\x1b\x7f\x85 end \ufffd",
    "NUL inside\x00the text",
    "\x00",
    "zero\u200bwidth\u200cjoin\u200dmarks\u2060and\ufeffbom \u00adsoft\u00adhyphen",
    "right\u200fto\u200eleft marks \u202eoverride\u202c",
    "private \ue000\uf8ff use",
    "Ｆｕｌｌｗｉｄｔｈ　ＡＳＣＩＩ　１２３",
    "𝐌𝐚𝐭𝐡 𝔉𝔯𝔞𝔨𝔱𝔲𝔯 𝕕𝕠𝕦𝕓𝕝𝕖",
    "a" * 100,
    "b" * 101,
    "supercalifragilisticexpialidocious" * 8,
    "A very long word " + "pneumonoultramicroscopicsilicovolcanoconiosis" * 3 + " in a sentence.",
    "1234567890 3.14159 -42 +7 1e10 0x1F 1,000,000 12:30 2024-01-31 50% $100 €99 £5 ¥1000",
    "0",
    "31415926535897932384626433832795028841971693993751058209749445923078164062862089986280",
    "!!!???...,,,;;;:::---___***&&&%%%$$$###@@@",
    "................................................................................",
    "«quoted» „low“ ‚single‘ “double” ‘single’ — – … · • ¿¡ ‽ ※ § ¶",
    "https://www.example.com/path/to/page?query=value&other=123#fragment",
    "user.name+tag@example.co.uk ftp://files.example.org/pub/file-1.2.3.tar.gz",
    "[CLS] [SEP] [MASK] [PAD] [UNK] inside the text: a[MASK]b [mask] [CLS][SEP]",
    "The café in 東京 sells 🍵 matcha for ¥500 — naïve tourists pay €5!",
    "Mixed: English, Ελληνικά, русский, 中文, 日本語, 한국어, العربية, עברית, हिन्दी 👋",
    "I can't, won't, shouldn't've; it's John's (and O'Brien's) e-mail.",
    "C++ vs. C# vs. F#: int main() { return 0; } // x <= y && y != z",
]


def _edge_generated(rng, n):
    """Mixed texts: English clauses with scripts, emoji, controls and marks
    spliced in; every tenth one long (300 to 700 pre-tokens)."""
    inserts = ["北京", "東京タワー", "ひらがな", "한국어", "ภาษาไทย", "مرحبا", "שלום", "नमस्ते",
               "Москва", "Ελλάδα", "😀", "👍🏿", "👨‍💻", "🇩🇪", "☕", "\u0301", "\u0308", "\x01",
               "\u200b", "\ufeff", "\u00a0", "\u3000", "\t", "\n", "…", "—", "¿", "«", "»",
               "123", "4.5", "99%", "$20", "x" * 120, "[MASK]", "ﬁ", "Æ", "ß"]
    out = []
    for i in range(n):
        target = rng.randint(300, 700) if i % 10 == 9 else log_uniform(rng)
        words = english(rng, target).split(" ")
        for _ in range(max(1, len(words) // 6)):
            pos = rng.randrange(len(words) + 1)
            words.insert(pos, rng.choice(inserts))
        out.append(" ".join(words))
    return out


# ------------------------------------------------------------------ the two lists

def corpus(count=1000, seed=20):
    """count texts: EDGE and generated mixed texts (an eighth in all), the
    rest English, the edge cases in places the seed picks."""
    rng = random.Random(seed)
    n_edge = max(len(EDGE), count // 8)
    if count < n_edge:
        raise ValueError("count %d: at least %d (the edge cases)" % (count, n_edge))
    edge = list(EDGE) + _edge_generated(rng, n_edge - len(EDGE))
    plain = [english(rng, log_uniform(rng)) for _ in range(count - n_edge)]
    slots = list(range(count))
    rng.shuffle(slots)
    edge_at = set(slots[:n_edge])
    out, e, p = [], iter(edge), iter(plain)
    for i in range(count):
        out.append(next(e) if i in edge_at else next(p))
    return out


def bench(count=1000, seed=21):
    """count English texts of 5 to 200 pre-tokens, log-uniform."""
    rng = random.Random(seed)
    return [english(rng, log_uniform(rng)) for _ in range(count)]


def main():
    ap = argparse.ArgumentParser(prog="sentences.py", description=__doc__.split("\n")[0])
    ap.add_argument("--bench", action="store_true", help="the benchmark's English sentences")
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--seed", type=int)
    a = ap.parse_args()
    if a.count < (1 if a.bench else len(EDGE)):
        ap.error("--count %d: at least %d" % (a.count, 1 if a.bench else len(EDGE)))
    if a.bench:
        texts = bench(a.count, 21 if a.seed is None else a.seed)
    else:
        texts = corpus(a.count, 20 if a.seed is None else a.seed)
    sys.stdout.write("".join(json.dumps(t) + "\n" for t in texts))


if __name__ == "__main__":
    main()
