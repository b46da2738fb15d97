"""tokenizer_corpus.py - the texts the C tokenizer is compared on with the
tokenizers library (test_tokenizer.py) and timed on
(loadgen/bench/tokenizer.sh): hand-picked edge cases, then texts made by a
seeded random generator from pools of scripts, spaces, marks, emoji,
numbers, URLs and random code points. The same seed gives the same texts on
every machine (Python's random is stable across versions for these calls).

    python3 tokenizer_corpus.py [mixed|english [N]] > corpus.jsonl   # one JSON string a line
"""

import json
import random
import sys

EDGE = [
    "",
    " ",
    "\t\n\r ",
    "Hello, world!",
    "HELLO World hello",
    "Café crème brûlée à la mode, naïve façade, Ångström, Ærø, Øresund, Łódź",
    "e\u0301 a\u0308 o\u0302\u0323 n\u0303 (combining marks after the letter)",
    "a\u0323\u0302 a\u0302\u0323 q\u0307\u0323 (marks in both orders)",
    # Two spacing marks out of order, with a nonspacing starter (U+0E31,
    # class 0, stripped) between them or not: NFD orders them only without.
    "a\U0001d16d\u0e31\U0001d165 b\U0001d16d\U0001d165 c\U0001d16d\u0301\U0001d165",
    "\u1e69\u0307 \u0344 \u0f73 \u0f75 \u0f81 \U0001d160 \U0001d15f\U0001d165 \u2000\u2001",
    "İstanbul ıi İI ǅǄǆ ẞß ΣΑΣ ςσ ﬃ ﬁ Ⅻ ⓐⒶ",
    "北京是中国的首都。我爱自然语言处理！",
    "日本語のテキスト、ひらがなとカタカナ。東京タワー",
    "한국어 텍스트입니다. 안녕하세요! 서울특별시",
    "ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ สวัสดีครับ",
    "العربية: مرحبا بالعالم، كيف حالك؟ ١٢٣٤٥",
    "עברית: שָׁלוֹם עוֹלָם",
    "हिन्दी भाषा में पाठ। नमस्ते दुनिया",
    "Emoji 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️ 🇫🇷🇯🇵 #️⃣ 🫠 🥰",
    "Controls:\x00\x01\x02\x07\x08\x0b\x0c\x1b\x7f\x85 end \ufffd\ufffd",
    "zero\u200bwidth\u200cjoin\u200dmarks\u2060and\ufeffbom \u00adsoft\u00adhyphen",
    "NBSP\u00a0here\u2002en\u2003em\u2009thin\u202fnarrow\u205fmath\u3000ideographic\u1680ogham",
    "line\u2028sep\u2029para\u0085nel",
    "private \ue000\uf8ff\U000f0000 use",
    "a" * 100,
    "a" * 101,
    "supercalifragilisticexpialidocious" * 4,
    "é" * 101,
    "pneumonoultramicroscopicsilicovolcanoconiosis antidisestablishmentarianism",
    "!!!???...,,,;;;:::---___***&&&%%%$$$###@@@",
    "«quoted» „low“ ‚single‘ “double” ‘single’ — – … · • ¿¡ ‽ ※ § ¶",
    "1234567890 3.14159 -42 +7 1e10 0x1F 1,000,000 12:30 2024-01-31 50% $100 €99 £5 ¥1000",
    "https://www.example.com/path/to/page?query=value&other=123#fragment",
    "user.name+tag@example.co.uk ftp://files.example.org/pub/file-1.2.3.tar.gz",
    "[CLS] [SEP] [MASK] [PAD] [UNK] inside text: a[MASK]b [mask] [CLS][SEP]",
    "[[MASK]] [MASK[MASK]] [MAS K] [MASK",
    "Ｆｕｌｌｗｉｄｔｈ　ＡＳＣＩＩ　１２３",
    "𝐌𝐚𝐭𝐡 𝔉𝔯𝔞𝔨𝔱𝔲𝔯 𝕕𝕠𝕦𝕓𝕝𝕖 ℌℑℜ",
    "Ελληνικά: Καλημέρα κόσμε, ΆΈΉΊΌΎΏ ΪΫ",
    "Русский текст: Привет, мир! Ёлка ёж",
    "Tiếng Việt có dấu: Xin chào thế giới, người Việt",
    "\u0300\u0301 marks at the very start",
    "\u3400\u4dbf\U00020000\U0002a6d6\uf900\ufa6d\U0002f800 (CJK extension and compatibility ideographs)",
    "\U00020000\U0002a6df\U0002a700\U0002b81f\U0002b820\U0002b920\U0002ceaf\U00030000",
    "\u0890\u08e2\U000110cd\U00013430 \u061d\u166d\u1734\U000111c9 \u1df6\U00011938 (where Unicode moved on)",
    "\ua7cb\ua7cc\ua7dc\U00010d50\U00016ea0 (capitals of Unicode 16 and 17)",
]


def _pools():
    words = ("the of and to in is you that it he was for on are as with his they at be this "
             "from have or by one had not but what all were when we there can an your which their "
             "said if do will each about how up out them then she many some so these would other "
             "into has more her two like him see time could no make than first been its who now "
             "people my made over did down only way find use may water long little very after "
             "words called just where most know get through back much before go good new write our "
             "used me man too any day same right look think also around another came come work "
             "three word must because does part even place well such here take why things help put "
             "years different away again off went old number great tell men say small every found "
             "still between name should home big give air line set own under read last never us left "
             "end along while might next sound below saw something thought both few those always "
             "looked show large often together asked house don't world going want school important "
             "until form food keep children feet land side without boy once animals life enough took "
             "sometimes four head above kind began almost live page got earth need far hand high year "
             "mother light parts country father let night following picture being study second eyes "
             "unbelievable tokenization transformers embedding multilingual preprocessing "
             "reinforcement hyperparameter backpropagation").split()
    accented = ("café résumé naïve coöperate façade jalapeño piñata über straße Müller Ærø "
                "smörgåsbord crème déjà señor São Paulo Kraków Dvořák Škoda Zürich Besançon "
                "Fußgängerübergänge Ελλάδα Москва Україна").split()
    scripts = ["北京", "上海市", "中华人民共和国", "東京", "ひらがな", "カタカナ", "한국어", "서울",
               "ภาษาไทย", "สวัสดี", "مرحبا", "العربية", "שלום", "नमस्ते", "हिन्दी", "বাংলা",
               "தமிழ்", "ქართული", "Հայերեն", "ኢትዮጵያ", "ᠮᠣᠩᠭᠣᠯ", "ꦗꦮ", "ᏣᎳᎩ", "𓀀𓁐"]
    emoji = ["😀", "😂", "🥰", "🫠", "👍", "👍🏿", "👨‍💻", "👩‍❤️‍👨", "👨‍👩‍👧‍👦", "🏳️‍🌈",
             "🇺🇸", "🇩🇪", "❤️", "✔️", "☕", "🚀", "1️⃣", "🧑🏽‍🚀"]
    spaces = [" ", " ", " ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u2002", "\u2003", "\u2009",
              "\u200a", "\u202f", "\u205f", "\u3000", "\u1680", "\u2028", "\u0085", "\x0b", "\x0c"]
    marks = ["\u0300", "\u0301", "\u0302", "\u0303", "\u0308", "\u030a", "\u0323", "\u0327",
             "\u0331", "\u0345", "\u05b7", "\u064b", "\u0951", "\u0e31", "\u20dd", "\u1dc0",
             "\u0f71", "\u0f72", "\U0001d165", "\U0001d16d"]
    punct = list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~") + \
        ["¡", "¿", "«", "»", "—", "–", "…", "·", "、", "。", "「", "」", "‘", "’", "“", "”", "•",
         "※", "§", "¶", "†", "‡", "°", "±", "×", "÷", "¬", "¦", "©", "®", "™"]
    controls = ["\x00", "\x01", "\x1f", "\x7f", "\u0080", "\u009f", "\u00ad", "\u200b", "\u200d",
                "\u2060", "\ufeff", "\ufffd", "\ue000", "\U000e0001", "\U000e0020"]
    return words, accented, scripts, emoji, spaces, marks, punct, controls


def _random_codepoint(rng):
    while True:
        plane = rng.random()
        if plane < 0.6:
            c = rng.randrange(0x80, 0x10000)
        elif plane < 0.9:
            c = rng.randrange(0x10000, 0x40000)
        else:
            c = rng.randrange(0xE0000, 0x110000)
        if not 0xD800 <= c <= 0xDFFF:
            return chr(c)


def _piece(rng, pools):
    words, accented, scripts, emoji, spaces, marks, punct, controls = pools
    r = rng.random()
    if r < 0.40:
        w = rng.choice(words)
        k = rng.random()
        return w.upper() if k < 0.1 else (w.capitalize() if k < 0.3 else w)
    if r < 0.50:
        return rng.choice(accented)
    if r < 0.58:
        return rng.choice(scripts)
    if r < 0.63:
        return rng.choice(emoji)
    if r < 0.70:
        return "".join(rng.choice(punct) for _ in range(rng.randint(1, 4)))
    if r < 0.75:
        return str(rng.choice([rng.randint(0, 99), rng.randint(0, 10 ** 9),
                               round(rng.uniform(-1000, 1000), rng.randint(1, 4))]))
    if r < 0.78:
        return "https://%s.example.%s/%s?id=%d" % (rng.choice(words), rng.choice(["com", "org", "io"]),
                                                  rng.choice(words), rng.randint(1, 9999))
    if r < 0.83:
        return rng.choice(words) + "".join(rng.choice(marks) for _ in range(rng.randint(1, 3)))
    if r < 0.86:
        return rng.choice(controls)
    if r < 0.89:
        return "".join(rng.choice("abcdefghijklmnopqrstuvwxyzéü") for _ in range(rng.randint(90, 130)))
    if r < 0.91:
        return rng.choice(["[MASK]", "[CLS]", "[SEP]", "[UNK]", "[PAD]", "[mask]"])
    return "".join(_random_codepoint(rng) for _ in range(rng.randint(1, 6)))


def texts(n=1200, seed=20):
    """EDGE, then n generated texts: mostly short ones, some long enough to
    be cut at 256 tokens."""
    rng = random.Random(seed)
    pools = _pools()
    spaces = pools[4]
    out = list(EDGE)
    for i in range(n):
        r = rng.random()
        count = rng.randint(0, 3) if r < 0.05 else (rng.randint(150, 700) if r < 0.12
                                                    else rng.randint(1, 40))
        parts = []
        for _ in range(count):
            parts.append(_piece(rng, pools))
            parts.append(rng.choice(spaces) if rng.random() < 0.85 else "")
        out.append("".join(parts))
    return out


def english(n=2000, seed=21):
    """n sentences of plain English words and punctuation (5 to 60 words):
    the common case, for timing."""
    rng = random.Random(seed)
    words = _pools()[0]
    out = []
    for _ in range(n):
        ws = [rng.choice(words) for _ in range(rng.randint(5, 60))]
        ws[0] = ws[0].capitalize()
        for i in range(1, len(ws) - 1):
            if rng.random() < 0.08:
                ws[i] += rng.choice([",", ";", ":"])
        out.append(" ".join(ws) + rng.choice([".", ".", ".", "?", "!"]))
    return out


if __name__ == "__main__":
    which = sys.argv[1] if len(sys.argv) > 1 else "mixed"
    n = int(sys.argv[2]) if len(sys.argv) > 2 else None
    for t in (english(n or 2000) if which == "english" else texts(n or 1200)):
        sys.stdout.write(json.dumps(t) + "\n")
