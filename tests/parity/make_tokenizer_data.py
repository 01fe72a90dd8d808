#!/usr/bin/env python3
"""Builds the tokenizer.json files and the reference encodings under
tests/data/tokenizers/ that tests/text checks kiln's tokenizer against
(docs/text.md, "How it was checked").

Everything is made offline: each tokenizer is trained with Hugging Face's
`tokenizers` on the licenses Debian ships (/usr/share/common-licenses) and on
sentences built below from a seeded random generator, then the test strings
(also seeded) are encoded by transformers' PreTrainedTokenizerFast and, as a
cross-check, by the raw `tokenizers.Tokenizer`: the script stops unless both
agree on every value it saves. Offsets are saved as byte offsets into the
UTF-8 text (both libraries give code point offsets).

    python3 tests/parity/make_tokenizer_data.py [--out tests/data/tokenizers]

Needs tokenizers (0.23) and transformers (5.x); kiln's tests never run Python.
The library's WordPiece trainer orders tokens by hash-map iteration, so a rerun
may number some tokens differently: the checked-in files are the reference.
"""
import argparse
import glob
import json
import os
import random

from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, processors, trainers)
from transformers import PreTrainedTokenizerFast

LICENSES = sorted(glob.glob("/usr/share/common-licenses/*"))

# Short sentences in many scripts (written for this file), mixed into both the
# training text and the test strings.
SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "It's a test, isn't it? We're sure they'll agree; I've seen what you'd do.",
    "Le café est très chaud ce matin, n'est-ce pas ?",
    "Größere Übungen für Schüler: Straße, Fußgänger, ärgerlich.",
    "¿Dónde está la estación? ¡Mañana será otro día!",
    "Ação, coração e informação não são difíceis.",
    "Tiếng Việt có nhiều dấu thanh: ả, ạ, ệ, ở, ữ.",
    "Η γλώσσα είναι όμορφη· ΟΔΟΣ, οδός, Σίσυφος.",
    "Привет, мир! Съешь же ещё этих мягких французских булок.",
    "Ґанок, їжак, єнот і щука.",
    "我们今天去公园散步，天气很好。",
    "机器学习需要大量的数据和计算资源。",
    "東京は日本の首都です。ひらがなとカタカナ、ｶﾀｶﾅ。",
    "안녕하세요, 세계! 한국어 문장입니다.",
    "مرحبا بالعالم، هذه جملة عربية.",
    "كَتَبَ الطَّالِبُ الدَّرْسَ",
    "שָׁלוֹם עוֹלָם, זה משפט בעברית.",
    "नमस्ते दुनिया, यह एक वाक्य है।",
    "สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่าง",
    "İstanbul'da ılık bir gün; IĞDIR, ŞİŞLİ.",
    "Zażółć gęślą jaźń.",
    "I ❤️ NY 👍🏽 👨‍👩‍👧‍👦 🇫🇷 1️⃣ 🏳️‍🌈 😀😃😄",
    "Ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３ and ½ ﬁ ﬂ ㎏ Ⅻ",
    "def f(x):\n\treturn x ** 2  # square\n",
    "https://example.org/path?q=1&r=two#frag user@example.com C:\\Users\\me",
    '{"key": [1, 2.5, -3e10], "ok": true}',
    "Prices: $5.99, €12,50, ¥1000, £3; 50% off!!! (really???)",
    "2024-01-31 12:34:56 +01:00; 3.14159265358979; 1,000,000; 0x1F600",
    "“Quoted” ‘text’ «guillemets» — dashes – and… ellipses",
]

WORDS = ("the of and to in is for that with as by on this license software be are "
         "you any or under work from may program not use it copyright source code "
         "Running running RUN ran runner unbelievable tokenization kiln oven "
         "naïve café résumé coöperate façade jalapeño Ångström ﬁnal").split()

SPECIAL_IN_TEXT = ["[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]", "[cls]", "[MASK", "<|endoftext|>",
                   "<s>", "</s>", "<mask>", "<unk>", "<|begin_of_text|>", "<|end_of_text|>",
                   "Kiln Tokens", "kiln tokens", "<kiln>"]

WHITESPACE = ["\t", "\n", "\r", "\r\n", "\v", "\f", "\u00a0", "\u1680", "\u2000", "\u2003",
              "\u2009", "\u200a", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\u0085",
              "  ", "   ", "\u001c"]

CONTROL = ["\x00", "\x01", "\x07", "\x1b", "\x7f", "\u00ad", "\u200b", "\u200c", "\u200d",
           "\u200e", "\u2060", "\u2066", "\u061c", "\ufeff", "\ue000", "\U000f0000", "\ufffd",
           "\ufff9", "\u0378", "\u0890", "\U000110cd", "\U000e0001", "\u180e"]

# Combining marks, precomposed letters and their decompositions, marks from
# several Unicode versions (the tokenizers library's tables are not all of
# one version: docs/text.md, "Unicode").
ACCENTS = ["e\u0301", "a\u0308\u0323", "a\u0323\u0308", "\u00e9\u0323", "o\u0302\u0301",
           "e\u0301\u0302", "\u1ec7", "\u01d5", "\u0130", "\u0131", "\u03a3", "\u1e9e", "\u00df",
           "\ufb01", "\u2126", "\u212b", "\u0344", "\u0958", "\u0915\u093c", "\u1100\u1161\u11a8",
           "\uac01", "n\u0303", "\u0301", "x\u08d4y", "x\u1ab0y", "x\u1734y", "x\U000111c9y",
           "\u166d", "\u0f73", "q\u20ddz", "\u0345", "\u1fb3", "\u0149", "\u01f0",
           # Reordered and composed marks, and marks newer than Unicode 9.0.
           "\ubce4\u1deb\u20ef", "\u01c4\u0331", "\u01c7\u1de6\u0f73", "\u00e9\u0323\u0344",
           "\u1acb\u20d9", "\u1df7\ufe2a", "s\u0323\u0307", "s\u0307\u0323x", "\u0958x",
           "\u212b\u00c5", "x\u1885y", "x\ua9bdy", "a\u0344xy", "\u01d5xy"]

OTHER = ["\U00010000\U00010001", "\U00012000", "\u4dc0", "\U0002b820", "\U0002b920",
         "\U0002a6e0", "\U00030000", "\uf900", "\u2e43", "\u2e4f", "\u00bf\u00a1", "\u0e3f",
         "\U0001f9d1\u200d\U0001f4bb", "\U0001fae8", "\U0001f600" * 3, "a\u20ac", "\u2212"]

PUNCTUATION = ["!!!", "???", "...", "?!", "---", "--", "''", "``", '"', "'", "(", ")", "[", "]",
               "{", "}", "<", ">", "@#$%^&*", "~`|\\", "_", "__init__", "::", "->", "=>", "/",
               ";", "•", "·", "、", "。", "「」", "،", "؟"]

CONTRACTIONS = ["it's", "IT'S", "we're", "We'Re", "I've", "don't", "DON'T", "she'll", "I'd",
                "I'm", "y'all", "rock'n'roll", "'s", "'S", "’s", "can’t", "o'clock", "'tis"]

NUMBERS = ["0", "7", "42", "123", "1234", "12345", "1234567890123", "3.14", "-17", "1e-9",
           "1,000,000", "٣٤٥", "१२३", "①②", "Ⅻ", "²³", "½", "0xFF", "v2.0.1", "10km", "4th"]


def long_word(rng, n):
    letters = "abcdefghijklmnopqrstuvwxyz"
    return "".join(rng.choice(letters) for _ in range(n))


def fragment(rng):
    kind = rng.random()
    if kind < 0.25:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6)))
    pools = [SENTENCES, SPECIAL_IN_TEXT, WHITESPACE, CONTROL, ACCENTS, OTHER, PUNCTUATION,
             CONTRACTIONS, NUMBERS]
    return rng.choice(rng.choice(pools))


def mixed_string(rng):
    parts = []
    for _ in range(rng.randint(1, 6)):
        piece = fragment(rng)
        case = rng.random()
        if case < 0.1:
            piece = piece.upper()
        elif case < 0.2:
            piece = piece.title()
        parts.append(piece)
        parts.append(rng.choice(["", " ", " ", " ", "  ", "\n", "\t", ", "]))
    return "".join(parts)


def license_lines():
    lines = []
    for path in LICENSES:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines.extend(line.rstrip("\n") for line in f)
    return lines


def test_strings(seed=1):
    """The strings every tokenizer is checked on: fixed cases, then seeded mixtures."""
    rng = random.Random(seed)
    fixed = ["", " ", "   ", "a", "A", "\n", "\t\t", "hello", " hello", "hello ",
             "  hello  world  ", "Hello, World!", "HELLO world", "hello[MASK]world",
             "[CLS] hello [SEP]",
             "[CLS][SEP][MASK]", "a [MASK]b", "a  <mask> b", "<mask>", " <mask>", "<s></s>",
             "x<|endoftext|>y", "<|endoftext|><|endoftext|>", "<|begin_of_text|>hi",
             "kiln tokens", "Kiln Tokens!", "kilntokens", "a kiln tokens_b", "<kiln>", " <kiln>  x",
             "[UNK] [PAD]", "[mask]", "[MASK", "MASK]", " <mask>  <mask>", "<kiln><kiln>",
             "<kiln>   <kiln>  x", "a\t<mask>\n", "[CLS]\u0301", "<|endoftext|>\u0301"]
    fixed += SENTENCES + SPECIAL_IN_TEXT + WHITESPACE + CONTROL + ACCENTS + OTHER + PUNCTUATION
    fixed += CONTRACTIONS + NUMBERS
    fixed += ["x" + w + "y" for w in WHITESPACE + CONTROL]
    fixed += [w + " word" for w in CONTROL]
    for n in (99, 100, 101, 150, 400):
        fixed.append(long_word(rng, n))
        fixed.append("word " + long_word(rng, n) + " word")
    fixed.append("é" * 101)
    fixed.append("1" * 40 + " " + "9" * 7)
    fixed.append("!" * 30 + "?" * 5)
    fixed.append(" ".join(SENTENCES))
    lines = license_lines()
    picks = rng.sample(range(len(lines)), 300)
    strings = fixed + [lines[i] for i in picks]
    while len(strings) < 1800:
        strings.append(mixed_string(rng))
    return strings


def training_text(seed=0):
    rng = random.Random(seed)
    text = license_lines()
    text += [mixed_string(rng) for _ in range(3000)]
    text += SENTENCES * 20
    return text


# --- the tokenizers ---------------------------------------------------------------

def template(single, pair, tok, names):
    return processors.TemplateProcessing(single=single, pair=pair,
                                         special_tokens=[(n, tok.token_to_id(n)) for n in names])


def bert(text, lowercase, vocab_size):
    """BERT's pipeline as transformers' BertTokenizerFast builds it."""
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                strip_accents=None if lowercase else False,
                                                lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok.train_from_iterator(text, trainers.WordPieceTrainer(
        vocab_size=vocab_size, min_frequency=2, special_tokens=specials,
        continuing_subword_prefix="##"))
    if lowercase:
        tok.post_processor = template("[CLS] $A [SEP]", "[CLS] $A [SEP] $B:1 [SEP]:1", tok,
                                      ["[CLS]", "[SEP]"])
        # A non-special added token matched on the normalized (lowercased) text.
        tok.add_tokens([AddedToken("Kiln Tokens", normalized=True, single_word=True)])
    else:
        tok.post_processor = processors.BertProcessing(("[SEP]", tok.token_to_id("[SEP]")),
                                                       ("[CLS]", tok.token_to_id("[CLS]")))
        tok.add_tokens([AddedToken("<kiln>", normalized=False, rstrip=True)])
    return tok


def byte_level_bpe(text, vocab_size, specials, add_prefix_space):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(text, trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=2, special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return tok


def gpt2(text):
    tok = byte_level_bpe(text, 4000, ["<|endoftext|>"], add_prefix_space=False)
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def roberta(text):
    tok = byte_level_bpe(text, 2000, ["<s>", "<pad>", "</s>", "<unk>"], add_prefix_space=True)
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True)])
    tok.post_processor = processors.RobertaProcessing(("</s>", tok.token_to_id("</s>")),
                                                      ("<s>", tok.token_to_id("<s>")),
                                                      trim_offsets=True, add_prefix_space=True)
    return tok


LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def llama3(text):
    """Llama 3's pipeline: a Split regex, then ByteLevel without its own regex."""
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    specials = ["<|begin_of_text|>", "<|end_of_text|>"]
    tok.train_from_iterator(text, trainers.BpeTrainer(
        vocab_size=3000, min_frequency=2, special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True),
        template("<|begin_of_text|> $A", "<|begin_of_text|> $A:0 <|begin_of_text|>:1 $B:1", tok,
                 ["<|begin_of_text|>"])])
    return tok


def llama2(text):
    """Llama 2's tokenizer.json pipeline: spaces as "▁", no pre-tokenizer, BPE with
    byte fallback. Trained with a pre-tokenizer (whole lines as words are slow), which
    the saved file then drops, as Llama 2's has none."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"),
                                           normalizers.Replace(" ", "▁")])
    tok.pre_tokenizer = pre_tokenizers.Split("▁", behavior="merged_with_next")
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(content=" ", left=1)])
    tok.train_from_iterator(text, trainers.BpeTrainer(
        vocab_size=1500, min_frequency=2, special_tokens=["<unk>", "<s>", "</s>"]))
    tok.post_processor = template("<s> $A", "<s> $A $B:1", tok, ["<s>"])
    data = json.loads(tok.to_str())
    data["pre_tokenizer"] = None
    vocab = data["model"]["vocab"]
    for b in range(256):
        vocab.setdefault(f"<0x{b:02X}>", len(vocab))
    return Tokenizer.from_str(json.dumps(data))


def misc(text):
    """The remaining normalizers and pre-tokenizers, around a BPE with an unknown
    token and an end-of-word suffix."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, end_of_word_suffix="</w>"))
    tok.normalizer = normalizers.Sequence([
        normalizers.NFKD(), normalizers.StripAccents(), normalizers.NFC(), normalizers.Lowercase(),
        normalizers.Replace("``", '"'), normalizers.Replace(Regex(r"\d{5,}"), "<num>"),
        normalizers.Strip(left=True, right=True), normalizers.NFKC()])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation(behavior="isolated"),
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.Split(Regex(r"[aeiou]{2}"), behavior="merged_with_previous"),
        pre_tokenizers.Split("-", behavior="merged_with_next"),
        pre_tokenizers.Split(Regex(r"x+"), behavior="contiguous"),
        pre_tokenizers.Split(Regex(r"q"), behavior="removed", invert=False),
        pre_tokenizers.Whitespace()])
    tok.decoder = decoders.BPEDecoder(suffix="</w>")
    tok.train_from_iterator(text, trainers.BpeTrainer(
        vocab_size=1500, min_frequency=2, special_tokens=["<unk>", "<s>", "</s>"],
        end_of_word_suffix="</w>"))
    tok.post_processor = template("<s> $A </s>", "<s> $A </s> $B:1 </s>:1", tok, ["<s>", "</s>"])
    return tok


def nfd_whitespace_wordpiece(text):
    """WordPiece behind NFD, Strip, Whitespace and Sequence decoding: accents kept as
    combining marks."""
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=20))
    tok.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.Strip(right=False),
                                           normalizers.Replace(Regex(r"\s+"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(),
                                                 pre_tokenizers.Digits(individual_digits=False)])
    tok.decoder = decoders.Sequence([decoders.WordPiece(prefix="##", cleanup=False)])
    tok.train_from_iterator(text, trainers.WordPieceTrainer(
        vocab_size=1500, min_frequency=2, special_tokens=["[UNK]", "[CLS]", "[SEP]"]))
    tok.post_processor = template("[CLS] $A [SEP]", "[CLS] $A [SEP] $B:1 [SEP]:1", tok,
                                  ["[CLS]", "[SEP]"])
    return tok


# --- reference encodings ------------------------------------------------------------

def byte_offsets(text, offsets):
    """Code point offsets into text -> byte offsets into its UTF-8, flattened."""
    starts = [0]
    for ch in text:
        starts.append(starts[-1] + len(ch.encode("utf-8")))
    flat = []
    for begin, end in offsets:
        flat += [starts[begin], starts[end]]
    return flat


def check_same(what, ours, theirs):
    if ours != theirs:
        raise SystemExit(f"transformers and tokenizers disagree on {what}:\n{ours}\n{theirs}")


def reference(raw, fast, text, pair=None, add_special_tokens=True):
    """One encoding from transformers, checked against the raw tokenizer's."""
    e = raw.encode(text, pair, add_special_tokens=add_special_tokens)
    args = (text,) if pair is None else (text, pair)
    t = fast(*args, add_special_tokens=add_special_tokens, return_offsets_mapping=True,
             return_token_type_ids=True)
    check_same(repr(args), (e.ids, e.tokens, e.type_ids, e.offsets),
               (t["input_ids"], t.tokens(), t["token_type_ids"],
                [tuple(o) for o in t["offset_mapping"]]))
    out = {"ids": e.ids}
    # Tokens are saved where they are not the file's strings for the ids (an
    # added token that takes spaces, or one matched on normalized text): the test
    # reads the file's vocabulary itself for the others.
    if e.tokens != [file_vocabulary(raw)[i] for i in e.ids]:
        out["tokens"] = e.tokens
    if any(e.type_ids):
        out["type_ids"] = e.type_ids
    # A pair's offsets point into either text: 0 is the first, 1 the second.
    if pair is None:
        out["offsets"] = byte_offsets(text, e.offsets)
    else:
        seq = e.sequence_ids
        out["offsets"] = [o for i, s in enumerate(seq)
                          for o in byte_offsets(pair if s == 1 else text, [e.offsets[i]])]
    return out


_FILE_VOCABULARIES = {}


def file_vocabulary(raw):
    """id -> token as the file lists them: the model's, then the added tokens' content."""
    if id(raw) not in _FILE_VOCABULARIES:
        data = json.loads(raw.to_str())
        tokens = {i: t for t, i in data["model"]["vocab"].items()}
        tokens.update({t["id"]: t["content"] for t in data["added_tokens"]})
        _FILE_VOCABULARIES[id(raw)] = tokens
    return _FILE_VOCABULARIES[id(raw)]


def decoded(raw, fast, ids, skip):
    d = raw.decode(ids, skip_special_tokens=skip)
    check_same(f"decode {ids}", d, fast.decode(ids, skip_special_tokens=skip,
                                                clean_up_tokenization_spaces=False))
    return d


BATCHES = [
    # (padding, truncation) as the raw library takes them; the test applies the same.
    ({"strategy": "longest"}, None),
    ({"strategy": "longest", "pad_to_multiple_of": 8}, {"max_length": 24}),
    ({"strategy": "fixed", "length": 16}, {"max_length": 16}),
    ({"strategy": "fixed", "length": 10, "direction": "left"}, {"max_length": 10,
                                                                "direction": "left"}),
    (None, {"max_length": 7}),
    ({"strategy": "longest"}, {"max_length": 16, "strategy": "only_second"}),
]


def batch_reference(raw, fast, pad_token, texts, pairs, padding, truncation):
    raw = Tokenizer.from_str(raw.to_str())
    if padding:
        length = padding.get("length")
        raw.enable_padding(direction=padding.get("direction", "right"), length=length,
                           pad_to_multiple_of=padding.get("pad_to_multiple_of"),
                           pad_id=raw.token_to_id(pad_token), pad_token=pad_token)
    if truncation:
        raw.enable_truncation(truncation["max_length"],
                              direction=truncation.get("direction", "right"),
                              strategy=truncation.get("strategy", "longest_first"))
    inputs = list(zip(texts, pairs)) if pairs else texts
    encodings = raw.encode_batch(inputs)
    if not truncation or truncation.get("strategy", "longest_first") == "longest_first":
        fast.padding_side = padding.get("direction", "right") if padding else "right"
        fast.truncation_side = truncation.get("direction", "right") if truncation else "right"
        t = fast(texts, pairs, padding=("max_length" if padding and "length" in padding else
                                        bool(padding)),
                 max_length=(padding or {}).get("length") or (truncation or {}).get("max_length"),
                 truncation=bool(truncation),
                 pad_to_multiple_of=(padding or {}).get("pad_to_multiple_of"),
                 return_token_type_ids=True)
        check_same(f"batch {texts} {pairs}", [e.ids for e in encodings], t["input_ids"])
        check_same("batch type ids", [e.type_ids for e in encodings], t["token_type_ids"])
        check_same("batch mask", [e.attention_mask for e in encodings], t["attention_mask"])
    return [{"ids": e.ids, "tokens": e.tokens, "type_ids": e.type_ids,
             "attention_mask": e.attention_mask} for e in encodings]


def references(name, raw, path, strings, pad_token, count):
    fast = PreTrainedTokenizerFast(tokenizer_file=path, pad_token=pad_token,
                                   clean_up_tokenization_spaces=False)
    rng = random.Random(name)
    chosen = strings[:count]
    single = []
    for i, s in enumerate(chosen):
        r = reference(raw, fast, s)
        r["decoded"] = decoded(raw, fast, r["ids"], skip=True)
        if i % 8 == 0:
            r["decoded_with_special"] = decoded(raw, fast, r["ids"], skip=False)
            r["ids_without_special"] = reference(raw, fast, s, add_special_tokens=False)["ids"]
        single.append(r)
    pairs = []
    # transformers takes an empty second text for none.
    nonempty = [s for s in chosen if s]
    for _ in range(count // 10):
        a, b = rng.choice(nonempty), rng.choice(nonempty)
        r = reference(raw, fast, a, b)
        r["text"], r["pair"] = a, b
        pairs.append(r)
    batches = []
    for padding, truncation in BATCHES:
        texts = rng.sample(nonempty, 6)
        second = rng.sample(nonempty, 6) if rng.random() < 0.5 else None
        if truncation is not None and truncation.get("strategy") == "only_second":
            # Only the second text is cut: it must be the longer one.
            texts = rng.sample([s for s in nonempty if len(s) < 8], 6)
            second = rng.sample([s for s in nonempty if len(s) > 80], 6)
        batches.append({"texts": texts, "pairs": second, "padding": padding,
                        "truncation": truncation, "pad_token": pad_token,
                        "encodings": batch_reference(raw, fast, pad_token, texts, second,
                                                     padding, truncation)})
    vocab = raw.get_vocab(with_added_tokens=True)
    return {"tokenizer": os.path.basename(path), "vocab_size": raw.get_vocab_size(True),
            "max_id": max(vocab.values()), "single": single, "pairs": pairs, "batches": batches}


TOKENIZERS = [
    # name, builder, pad token, number of test strings
    ("bert_uncased", lambda t: bert(t, True, 4000), "[PAD]", 1800),
    ("bert_cased", lambda t: bert(t, False, 3000), "[PAD]", 800),
    ("gpt2", gpt2, "<|endoftext|>", 1800),
    ("roberta", roberta, "<pad>", 700),
    ("llama3", llama3, "<|end_of_text|>", 1800),
    ("llama2", llama2, "<unk>", 600),
    ("misc", misc, "<s>", 500),
    ("nfd_wordpiece", nfd_whitespace_wordpiece, "[SEP]", 500),
]


def legacy_merges(path):
    """Rewrites merges as "a b" strings, the older form tokenizer.json files still use."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    data["model"]["merges"] = [" ".join(pair) for pair in data["model"]["merges"]]
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, indent=1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "data",
                                                      "tokenizers"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    text = training_text()
    strings = test_strings()
    with open(os.path.join(args.out, "strings.json"), "w", encoding="utf-8") as f:
        json.dump(strings, f, ensure_ascii=False, indent=0)
    for name, build, pad_token, count in TOKENIZERS:
        path = os.path.join(args.out, name + ".json")
        build(text).save(path, pretty=False)
        if name in ("roberta", "llama2"):
            legacy_merges(path)
        raw = Tokenizer.from_file(path)
        refs = references(name, raw, path, strings, pad_token, count)
        with open(os.path.join(args.out, name + ".expected.json"), "w", encoding="utf-8") as f:
            json.dump(refs, f, ensure_ascii=False, separators=(",", ":"))
        sizes = [os.path.getsize(p) for p in (path, f.name)]
        print(f"{name}: {count} strings, {len(refs['pairs'])} pairs, files {sizes} bytes")


if __name__ == "__main__":
    main()
