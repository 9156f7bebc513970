#!/usr/bin/env python3
"""Validate queries.json against catalogue.json and print counts.

Checks: every non-null `expected` is a `{server}_{name}` in the catalogue,
no duplicate queries, field shape. Prints counts, distinct expected tools,
per-server counts (with tool counts), and wording statistics.
"""
import json, re, sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
cat = json.loads((HERE / "catalogue.json").read_text())
qs = json.loads((HERE / "queries.json").read_text())

tool_server = {}
server_tools = Counter()
for s in cat:
    for t in s["tools"]:
        tool_server[f"{s['server']}_{t['name']}"] = (s["server"], t["name"])
        server_tools[s["server"]] += 1

errors = []
seen = set()
for i, r in enumerate(qs):
    if set(r) != {"query", "expected"}:
        errors.append(f"#{i}: keys {sorted(r)}")
    q = r["query"]
    if not isinstance(q, str) or not q.strip():
        errors.append(f"#{i}: empty query")
    norm = " ".join(q.lower().split())
    if norm in seen:
        errors.append(f"#{i}: duplicate query {q!r}")
    seen.add(norm)
    e = r["expected"]
    if e is not None and e not in tool_server:
        errors.append(f"#{i}: unknown expected {e!r}")

pos = [r for r in qs if r["expected"] is not None]
neg = [r for r in qs if r["expected"] is None]
print(f"queries: {len(qs)}  with a right tool: {len(pos)}  no right tool (null): {len(neg)}")
print(f"distinct expected tools: {len({r['expected'] for r in pos})} of {len(tool_server)}")

per = Counter(tool_server[r["expected"]][0] for r in pos if r["expected"] in tool_server)
print("\nper server (queries / tools):")
for s in cat:
    n = s["server"]
    print(f"  {n:22s} {per[n]:3d} / {server_tools[n]:3d}")

# Wording statistics (approximate).
STOP = set("a an the to of in on for and or by with from into is are be my me i you your it this that "
           "get list create update delete set new all any".split())
def words(text):
    text = re.sub(r"([a-z])([A-Z])", r"\1 \2", text)
    return [w for w in re.findall(r"[a-z0-9]+", text.lower())]
def stem(w):
    for suf in ("ing", "es", "ed", "s"):
        if w.endswith(suf) and len(w) - len(suf) >= 3:
            return w[: -len(suf)]
    return w
BRANDS = {
    "git": [r"\bgit\b"], "github": ["github"], "gitlab": ["gitlab"], "circleci": ["circleci"],
    "slack": ["slack"], "twilio": ["twilio"], "google-calendar": ["google"], "hubspot": ["hubspot"],
    "notion": ["notion"], "context7": ["context7"], "figma": ["figma"], "stripe": ["stripe"],
    "shopify-dev": ["shopify"], "postgres": ["postgres"], "supabase": ["supabase"], "pinecone": ["pinecone"],
    "elasticsearch": ["elastic"], "kubernetes": ["kubernet", "k8s", "kubectl", "helm"], "heroku": ["heroku"],
    "aws-kb-retrieval": ["aws", "bedrock"], "launchdarkly": ["launchdarkly"], "sentry": ["sentry"],
    "datadog": ["datadog"], "brave-search": ["brave"], "brave-search-ref": ["brave"], "tavily": ["tavily"],
    "exa": [r"\bexa\b"], "perplexity": ["perplexity"], "playwright": ["playwright"], "puppeteer": ["puppeteer"],
    "browserbase": ["browserbase"], "google-maps": ["google maps"], "everart": ["everart"],
}
no_overlap = names_service = 0
for r in pos:
    server, name = tool_server[r["expected"]]
    tw = {stem(w) for w in words(name)} - STOP
    qw = {stem(w) for w in words(r["query"])} - STOP
    if not (tw & qw):
        no_overlap += 1
    if any(re.search(p, r["query"].lower()) for p in BRANDS.get(server, [])):
        names_service += 1
print(f"\npositive queries sharing no content word with the tool name: {no_overlap}/{len(pos)} ({no_overlap/len(pos):.0%})")
print(f"positive queries naming the service/product: {names_service}/{len(pos)} ({names_service/len(pos):.0%})")
lens = [len(r["query"].split()) for r in qs]
print(f"query length in words: min {min(lens)}, median {sorted(lens)[len(lens)//2]}, max {max(lens)}")
even, odd = qs[0::2], qs[1::2]
for label, half in (("even (tuning)", even), ("odd (held-out)", odd)):
    print(f"{label}: {len(half)} queries, {sum(r['expected'] is None for r in half)} null")

if errors:
    print("\nERRORS:")
    for e in errors:
        print("  " + e)
    sys.exit(1)
print("\nOK")
