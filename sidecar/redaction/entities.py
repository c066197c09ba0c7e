"""The entities a judge's redaction can take out of a run: Presidio's names, each with the recognizer that finds
it, and the default set. Read by the settings (``validate`` names an unknown entity) without importing Presidio,
so a configuration is checked even where the redaction packages are not installed.

Every entity here is found by a pattern (with a checksum where the format has one: Luhn for cards, mod-97 for
IBANs) or by a phone-number parser; none needs a language model. Names and places (``PERSON``, ``LOCATION``) need
a spaCy model with a named-entity recognizer: ``redact.names`` (docs/redaction.md).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

__all__ = [
    "DEFAULT_ENTITIES",
    "ENTITIES",
    "NAME_ENTITIES",
    "Entity",
    "unknown_entity_problem",
]


@dataclass(frozen=True, slots=True)
class Entity:
    name: str  # Presidio's entity name: what the settings list and the placeholders carry
    recognizer: str  # the class in presidio_analyzer.predefined_recognizers that finds it
    region: str  # "generic", or the country whose format it is (how docs/redaction.md groups them)


# The default: what costs at most 2 ms of CPU per judged run of the demo's traffic together and finds values by
# their checksum or an unambiguous shape (bench/redaction.py measures every entity; docs/redaction.md the figures).
# PHONE_NUMBER is left out for its cost: Presidio parses a text once per phone region (eight), ~1.5 ms for a text
# that holds a number, and a run that holds one would cost more than the default's budget alone.
DEFAULT_ENTITIES: Final[tuple[str, ...]] = ("EMAIL_ADDRESS", "CREDIT_CARD", "IBAN_CODE", "IP_ADDRESS", "US_SSN")

# What ``names: true`` adds, from the spaCy model's named entities (PERSON; GPE, LOC and FAC as LOCATION).
NAME_ENTITIES: Final[tuple[str, ...]] = ("PERSON", "LOCATION")

# Presidio has more recognizers than these: the ones here are those the redaction corpus
# (tests/support/redaction_corpus.py) holds values of, so that each is known to work. Adding one is a line here and
# its values there.
_TABLE: tuple[tuple[str, str, str], ...] = (
    ("EMAIL_ADDRESS", "EmailRecognizer", "generic"),
    ("CREDIT_CARD", "CreditCardRecognizer", "generic"),
    ("IBAN_CODE", "IbanRecognizer", "generic"),
    ("IP_ADDRESS", "IpRecognizer", "generic"),
    ("PHONE_NUMBER", "PhoneRecognizer", "generic"),
    ("URL", "UrlRecognizer", "generic"),
    ("MAC_ADDRESS", "MacAddressRecognizer", "generic"),
    ("CRYPTO", "CryptoRecognizer", "generic"),
    ("DATE_TIME", "DateRecognizer", "generic"),
    ("US_SSN", "UsSsnRecognizer", "us"),
    ("US_ITIN", "UsItinRecognizer", "us"),
    ("US_PASSPORT", "UsPassportRecognizer", "us"),
    ("US_BANK_NUMBER", "UsBankRecognizer", "us"),
    ("US_DRIVER_LICENSE", "UsLicenseRecognizer", "us"),
    ("ABA_ROUTING_NUMBER", "AbaRoutingRecognizer", "us"),
    ("UK_NHS", "NhsRecognizer", "uk"),
    ("UK_NINO", "UkNinoRecognizer", "uk"),
    ("UK_POSTCODE", "UkPostcodeRecognizer", "uk"),
    ("ES_NIF", "EsNifRecognizer", "spain"),
    ("ES_NIE", "EsNieRecognizer", "spain"),
    ("IT_FISCAL_CODE", "ItFiscalCodeRecognizer", "italy"),
    ("PL_PESEL", "PlPeselRecognizer", "poland"),
    ("FI_PERSONAL_IDENTITY_CODE", "FiPersonalIdentityCodeRecognizer", "finland"),
    ("SE_PERSONNUMMER", "SePersonnummerRecognizer", "sweden"),
    ("DE_TAX_ID", "DeTaxIdRecognizer", "germany"),
    ("AU_TFN", "AuTfnRecognizer", "australia"),
    ("AU_MEDICARE", "AuMedicareRecognizer", "australia"),
    ("IN_PAN", "InPanRecognizer", "india"),
    ("IN_AADHAAR", "InAadhaarRecognizer", "india"),
    ("SG_NRIC_FIN", "SgFinRecognizer", "singapore"),
)
ENTITIES: Final[Mapping[str, Entity]] = {name: Entity(name, recognizer, region) for name, recognizer, region in _TABLE}


def unknown_entity_problem(names: Iterable[str]) -> str | None:
    """What is wrong with a list of entity names (unknown ones, with the closest known name), or ``None``."""
    problems = []
    for name in names:
        if name in ENTITIES:
            continue
        if name in NAME_ENTITIES:
            problems.append(f"{name} is found by a language model: set names: true instead of listing it")
            continue
        close = difflib.get_close_matches(name.upper(), [*ENTITIES, *NAME_ENTITIES], n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        problems.append(f"unknown entity {name!r}{hint}")
    if not problems:
        return None
    return "; ".join(problems) + " — the entities are listed in docs/redaction.md"
