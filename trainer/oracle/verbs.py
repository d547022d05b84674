"""The verb-grammar corpus, generated in code: 20 verbs x 5 tenses x 3 persons, English = Spanish.

    forms = all_forms()                  # 600 VerbForm, fixed order, no randomness
    train, val = split_forms(forms)      # 480 / 120: the HELD_OUT verbs are validation only
    form.line                            # "we will speak = nosotros hablaremos"

Tenses: present, preterite (simple past), future, conditional, present perfect. Persons:
first, second and third, each singular and plural (I/yo, you/tú, he/él, we/nosotros,
you all/vosotros, they/ellos): 20 x 5 x 3 x 2 = 600 forms, one corpus line each. "you all"
keeps English unambiguous, so every Spanish form is determined by its English. Spanish
regular verbs follow the -ar / -er / -ir paradigms below; the irregular ones (tener,
hacer, decir) and the irregular participles (escrito, abierto) are written out. Verbs
whose regular forms need spelling changes (buscar -> busqué, leer -> leyó) are
deliberately not in the list.

Four verbs, one per paradigm plus an English-irregular one, are held out whole: the model
must generalise the grammar to stems it never saw, which is what makes held-out
perplexity a test of learning rather than memorisation.
"""

from __future__ import annotations

from dataclasses import dataclass

TENSES = ("present", "preterite", "future", "conditional", "perfect")
#: Three persons, each singular and plural, in the order every paradigm tuple below uses.
PERSONS = ("1sg", "2sg", "3sg", "1pl", "2pl", "3pl")
ENGLISH_PRONOUNS = dict(zip(PERSONS, ("I", "you", "he", "we", "you all", "they"), strict=True))
SPANISH_PRONOUNS = dict(
    zip(PERSONS, ("yo", "tú", "él", "nosotros", "vosotros", "ellos"), strict=True)
)
SPANISH_HABER = dict(zip(PERSONS, ("he", "has", "ha", "hemos", "habéis", "han"), strict=True))

# Regular endings by infinitive class, in PERSONS order.
_PRESENT = {
    "ar": ("o", "as", "a", "amos", "áis", "an"),
    "er": ("o", "es", "e", "emos", "éis", "en"),
    "ir": ("o", "es", "e", "imos", "ís", "en"),
}
_PRETERITE = {
    "ar": ("é", "aste", "ó", "amos", "asteis", "aron"),
    "er": ("í", "iste", "ió", "imos", "isteis", "ieron"),
    "ir": ("í", "iste", "ió", "imos", "isteis", "ieron"),
}
_FUTURE = ("é", "ás", "á", "emos", "éis", "án")  # added to the future stem (the infinitive)
_CONDITIONAL = ("ía", "ías", "ía", "íamos", "íais", "ían")  # likewise
_PARTICIPLE = {"ar": "ado", "er": "ido", "ir": "ido"}


@dataclass(frozen=True)
class Verb:
    english: str  # base form: "speak"
    third: str  # third person singular present: "speaks"
    past: str  # simple past: "spoke"
    participle: str  # past participle: "spoken"
    spanish: str  # infinitive: "hablar"
    # Irregular Spanish forms, overriding the paradigm: tense -> one form per PERSONS entry,
    # "future_stem" -> stem for future and conditional, "participle" -> participle.
    irregular: tuple[tuple[str, tuple[str, ...] | str], ...] = ()

    def _override(self, key: str) -> tuple[str, ...] | str | None:
        return dict(self.irregular).get(key)


VERBS: tuple[Verb, ...] = (
    Verb("speak", "speaks", "spoke", "spoken", "hablar"),
    Verb("walk", "walks", "walked", "walked", "caminar"),
    Verb("work", "works", "worked", "worked", "trabajar"),
    Verb("dance", "dances", "danced", "danced", "bailar"),
    Verb("sing", "sings", "sang", "sung", "cantar"),
    Verb("buy", "buys", "bought", "bought", "comprar"),
    Verb("study", "studies", "studied", "studied", "estudiar"),
    Verb("travel", "travels", "traveled", "traveled", "viajar"),
    Verb("eat", "eats", "ate", "eaten", "comer"),
    Verb("drink", "drinks", "drank", "drunk", "beber"),
    Verb("run", "runs", "ran", "run", "correr"),
    Verb("learn", "learns", "learned", "learned", "aprender"),
    Verb("sell", "sells", "sold", "sold", "vender"),
    Verb("live", "lives", "lived", "lived", "vivir"),
    Verb("write", "writes", "wrote", "written", "escribir", (("participle", "escrito"),)),
    Verb("open", "opens", "opened", "opened", "abrir", (("participle", "abierto"),)),
    Verb("receive", "receives", "received", "received", "recibir"),
    Verb(
        "have",
        "has",
        "had",
        "had",
        "tener",
        (
            ("present", ("tengo", "tienes", "tiene", "tenemos", "tenéis", "tienen")),
            ("preterite", ("tuve", "tuviste", "tuvo", "tuvimos", "tuvisteis", "tuvieron")),
            ("future_stem", "tendr"),
        ),
    ),
    Verb(
        "make",
        "makes",
        "made",
        "made",
        "hacer",
        (
            ("present", ("hago", "haces", "hace", "hacemos", "hacéis", "hacen")),
            ("preterite", ("hice", "hiciste", "hizo", "hicimos", "hicisteis", "hicieron")),
            ("future_stem", "har"),
            ("participle", "hecho"),
        ),
    ),
    Verb(
        "say",
        "says",
        "said",
        "said",
        "decir",
        (
            ("present", ("digo", "dices", "dice", "decimos", "decís", "dicen")),
            ("preterite", ("dije", "dijiste", "dijo", "dijimos", "dijisteis", "dijeron")),
            ("future_stem", "dir"),
            ("participle", "dicho"),
        ),
    ),
)

#: Validation only, never in training: one verb of each Spanish paradigm (-ar, -er, -ir)
#: and one whose English forms are irregular (sing/sang/sung).
HELD_OUT = ("dance", "learn", "receive", "sing")


@dataclass(frozen=True)
class VerbForm:
    verb: str  # English base form: identifies the verb
    tense: str
    person: str
    english: str  # "he will speak"
    spanish: str  # "él hablará"

    @property
    def line(self) -> str:
        """The corpus line: English = Spanish."""
        return f"{self.english} = {self.spanish}"


def english_form(verb: Verb, tense: str, person: str) -> str:
    pronoun = ENGLISH_PRONOUNS[person]
    third = person == "3sg"  # the only English person with its own verb forms
    phrase = {
        "present": verb.third if third else verb.english,
        "preterite": verb.past,
        "future": f"will {verb.english}",
        "conditional": f"would {verb.english}",
        "perfect": f"{'has' if third else 'have'} {verb.participle}",
    }[tense]
    return f"{pronoun} {phrase}"


def spanish_form(verb: Verb, tense: str, person: str) -> str:
    index = PERSONS.index(person)
    infinitive = verb.spanish
    stem, group = infinitive[:-2], infinitive[-2:]
    override = verb._override(tense)
    if isinstance(override, tuple):
        conjugated = override[index]
    elif tense == "present":
        conjugated = stem + _PRESENT[group][index]
    elif tense == "preterite":
        conjugated = stem + _PRETERITE[group][index]
    elif tense in ("future", "conditional"):
        future_stem = verb._override("future_stem") or infinitive
        endings = _FUTURE if tense == "future" else _CONDITIONAL
        conjugated = f"{future_stem}{endings[index]}"
    elif tense == "perfect":
        participle = verb._override("participle") or stem + _PARTICIPLE[group]
        conjugated = f"{SPANISH_HABER[person]} {participle}"
    else:
        raise ValueError(f"unknown tense {tense!r}; expected one of {TENSES}")
    return f"{SPANISH_PRONOUNS[person]} {conjugated}"


def all_forms() -> list[VerbForm]:
    """The 600 forms in a fixed order: verb, then tense, then person."""
    return [
        VerbForm(v.english, t, p, english_form(v, t, p), spanish_form(v, t, p))
        for v in VERBS
        for t in TENSES
        for p in PERSONS
    ]


def split_forms(
    forms: list[VerbForm], held_out: tuple[str, ...] = HELD_OUT
) -> tuple[list[VerbForm], list[VerbForm]]:
    """(training, validation): every form of a held-out verb goes to validation, whole."""
    known = {f.verb for f in forms}
    missing = sorted(set(held_out) - known)
    if missing:
        raise ValueError(f"held-out verbs {missing} are not in the corpus")
    train = [f for f in forms if f.verb not in held_out]
    val = [f for f in forms if f.verb in held_out]
    return train, val
