"""Product catalogues for the built-in WebShop: a seeded generator and a loader for WebShop's own files.

Products are plain dicts with WebShop's field names (`asin`, `name`, `Title`, `query`, `category`,
`product_category`, `BulletPoints`, `Description`, `Price`, `options`, `Attributes`), so that the
reward and page code reads generated and real products alike.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

from dreamgym_pl.core import DataError

# category -> (path prefix, product types, attribute pool, option pools, price range)
CATEGORIES: dict[str, dict[str, Any]] = {
    "beauty": {
        "path": "beauty & personal care",
        "types": {
            "makeup": ["lipstick", "eye shadow", "nail polish", "foundation"],
            "skin care": ["face cream", "body lotion", "sunscreen", "face mask"],
            "hair care": ["shampoo", "conditioner", "hair oil"],
        },
        "attributes": ["long lasting", "paraben free", "cruelty free", "natural ingredients", "sulfate free",
                       "easy to use", "travel size", "dry skin", "sensitive skin", "fragrance free",
                       "high quality", "anti aging"],
        "options": {"color": ["red", "pink", "nude", "coral", "berry", "brown", "clear"],
                    "size": ["small", "medium", "large", "travel", "pack of 2"]},
        "price": (4.0, 60.0),
    },
    "food": {
        "path": "grocery & gourmet food",
        "types": {
            "beverages": ["coffee", "green tea", "energy drink"],
            "snacks": ["protein bar", "granola", "beef jerky", "dark chocolate"],
            "pantry": ["olive oil", "hot sauce", "honey", "almond butter"],
        },
        "attributes": ["gluten free", "low sugar", "non gmo", "organic", "keto friendly", "low calorie",
                       "high protein", "sugar free", "dairy free", "vegan", "individually wrapped",
                       "ready to eat"],
        "options": {"flavor": ["vanilla", "chocolate", "original", "spicy", "mint", "caramel", "lemon"],
                    "size": ["12 ounce", "1 pound", "pack of 6", "pack of 12"]},
        "price": (3.0, 45.0),
    },
    "fashion": {
        "path": "clothing, shoes & jewelry",
        "types": {
            "shoes": ["running shoes", "sneakers", "sandals", "boots"],
            "tops": ["t-shirt", "hoodie", "sweater", "rain jacket"],
            "bottoms": ["jeans", "shorts", "leggings"],
        },
        "attributes": ["machine wash", "slim fit", "loose fit", "long sleeve", "short sleeve", "non slip",
                       "quick drying", "cotton", "water resistant", "button closure", "elastic waist",
                       "rubber sole"],
        "options": {"color": ["black", "white", "navy", "grey", "olive", "beige", "purple"],
                    "size": ["small", "medium", "large", "x-large", "xx-large"]},
        "price": (9.0, 90.0),
    },
    "electronics": {
        "path": "electronics",
        "types": {
            "audio": ["bluetooth speaker", "wireless earbuds", "headphones"],
            "accessories": ["usb cable", "phone case", "power bank", "charger"],
            "computers": ["keyboard", "webcam", "mouse", "monitor stand"],
        },
        "attributes": ["fast charging", "high speed", "noise cancelling", "water resistant", "easy to install",
                       "long battery life", "hands free", "plug and play", "heavy duty", "usb c",
                       "high definition", "compact design"],
        "options": {"color": ["black", "white", "silver", "blue", "rose gold"],
                    "style": ["3 feet", "6 feet", "10 feet", "standard", "pro"]},
        "price": (6.0, 120.0),
    },
    "furniture": {
        "path": "home & kitchen",
        "types": {
            "living room": ["coffee table", "tv stand", "sofa", "bookshelf"],
            "bedroom": ["bed frame", "nightstand", "dresser"],
            "office": ["office chair", "desk", "bar stool", "shoe rack"],
        },
        "attributes": ["easy assembly", "solid wood", "storage space", "living room", "space saving",
                       "heavy duty", "metal frame", "mid century", "assembly required", "wood finish",
                       "non slip", "height adjustable"],
        "options": {"color": ["white", "black", "walnut", "oak", "grey", "espresso"],
                    "size": ["small", "large", "2 pack", "queen", "full"]},
        "price": (20.0, 300.0),
    },
}

BRANDS = ["acme", "lumora", "vexo", "nordly", "pinecrest", "zentra", "kalio", "brightway", "orbis", "maple",
          "solano", "trevi", "quanta", "hollis", "rivora", "apex", "bellami", "corvo", "duna", "elmwood"]
DESCRIPTORS = ["classic", "premium", "deluxe", "essential", "everyday", "signature", "original", "ultra",
               "plus", "select"]
_ID_CHARS = "0123456789"


def _asin(rng: random.Random, used: set[str]) -> str:
    """Product ids like WebShop's ("b0...") but numeric: word tokenizers split digits, so a small model can
    copy an id digit by digit instead of meeting 1,000 rare id tokens."""
    while True:
        a = "b0" + "".join(rng.choice(_ID_CHARS) for _ in range(4))
        if a not in used:
            used.add(a)
            return a


def generate_catalogue(num_products: int = 1000, seed: int = 0) -> list[dict[str, Any]]:
    """A deterministic catalogue spread evenly over WebShop's five categories."""
    if not 0 < num_products <= 5000:
        raise ValueError(f"env.num_products: must lie in 1..5000, got {num_products}")
    rng = random.Random(seed)
    used: set[str] = set()
    cats = list(CATEGORIES)
    products = []
    for i in range(num_products):
        cat = cats[i % len(cats)]
        spec = CATEGORIES[cat]
        group = rng.choice(sorted(spec["types"]))
        ptype = rng.choice(spec["types"][group])
        brand = rng.choice(BRANDS)
        desc = rng.choice(DESCRIPTORS)
        attrs = rng.sample(spec["attributes"], rng.randint(3, 5))
        options = {}
        for otype, pool in spec["options"].items():
            if otype == "size" or rng.random() < 0.8:
                options[otype] = rng.sample(pool, rng.randint(2, min(4, len(pool))))
        lo, hi = spec["price"]
        price = round(rng.uniform(lo, hi), 2)
        title = f"{brand} {desc} {ptype}"
        products.append({
            "asin": _asin(rng, used),
            "name": title,
            "Title": title,
            "query": ptype,
            "category": cat,
            "product_category": " › ".join([spec["path"], group, ptype]),
            "BulletPoints": [f"{a} {ptype}" for a in attrs[:2]] + [f"made by {brand}"],
            "Description": f"the {brand} {ptype} is {', '.join(attrs)}.",
            "Price": price,
            "options": options,
            "Attributes": attrs,
        })
    return products


def _parse_price(p: Any) -> float:
    if isinstance(p, (int, float)):
        return float(p)
    m = re.search(r"\d+(?:\.\d+)?", str(p).replace(",", ""))
    if not m:
        raise ValueError(f"unparseable price {p!r}")
    return float(m.group(0))


def load_webshop_products(products_file: str, attributes_file: str | None = None) -> list[dict[str, Any]]:
    """Load WebShop's product JSON (e.g. items_shuffle_1000.json) and, optionally, its attribute file
    (items_ins_v2_1000.json: asin -> {"attributes": [...], ...}). Field names follow WebShop's data."""
    path = Path(products_file)
    if not path.exists():
        raise DataError(f"env.products_file: {path} not found")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise DataError(f"{path}:{e.lineno}: invalid JSON ({e.msg})") from e
    attrs: dict[str, Any] = {}
    if attributes_file:
        ap = Path(attributes_file)
        if not ap.exists():
            raise DataError(f"env.attributes_file: {ap} not found")
        try:
            attrs = json.loads(ap.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise DataError(f"{ap}:{e.lineno}: invalid JSON ({e.msg})") from e
    products = []
    for idx, p in enumerate(raw):
        try:
            asin = str(p["asin"]).lower()
            title = p.get("Title") or p.get("name") or ""
            opts_raw = p.get("customization_options") or p.get("options") or {}
            options = {}
            for k, vals in opts_raw.items():
                options[k.lower()] = [str(v["value"] if isinstance(v, dict) else v).lower() for v in vals]
            bullets = p.get("BulletPoints") or p.get("small_description") or []
            if isinstance(bullets, str):
                bullets = [bullets]
            desc = p.get("Description") or p.get("full_description") or ""
            price_field = p.get("Price", p.get("pricing"))
            if isinstance(price_field, list):
                price_field = price_field[0]
            products.append({
                "asin": asin,
                "name": p.get("name") or title,
                "Title": title,
                "query": str(p.get("query", "")).lower(),
                "category": str(p.get("category", "")).lower(),
                "product_category": str(p.get("product_category", "")).lower(),
                "BulletPoints": [str(b) for b in bullets],
                "Description": str(desc),
                "Price": _parse_price(price_field),
                "options": options,
                "Attributes": [a.lower() for a in (attrs.get(p["asin"], {}).get("attributes") or p.get("Attributes") or [])],
            })
        except (KeyError, ValueError, TypeError, AttributeError) as e:
            raise DataError(f"{path}: product #{idx}: {e!r}") from e
    return products
