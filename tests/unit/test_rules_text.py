"""tools/counters_cli/rules.py: the extension counters' generated rules, the old shard rules
`counters doctor` and `counters init` refuse, and the file the repository ships."""

from __future__ import annotations

from pathlib import Path

from counters_cli import rules
from counting.features import declarations
from counting.features.collections import Declaration, Extension

ROOT = Path(__file__).resolve().parents[2]
OWN = declarations.Declared.of_codebase(declarations.CODEBASE)
# The rule the extension's post-install guide asks for (firestore-counter/POSTINSTALL.md).
POSTINSTALL = """rules_version = '2';
service cloud.firestore {
  match /databases/{database}/documents/pages/{page} {
    // Allow to increment only the 'visits' field and only by 1.
    match /_counter_shards_/{shardId} {
      allow get;
      allow write: if request.resource.data.keys() == ["visits"]
                     && (resource == null || request.resource.data.visits ==
                     resource.data.visits + 1);
    }
  }
}
"""


def test_the_rules_file_holds_the_generated_rules() -> None:
    """firestore.rules holds what `counters extension-rules` prints for declarations.json."""
    text = (ROOT / "firestore.rules").read_text()
    block = rules.extension_rules(OWN.declarations)
    assert block in text
    assert text.count(rules.RULES_BEGIN) == 1


def test_the_rules_check_every_declared_field_and_level() -> None:
    two = [Declaration(counter="likes:{post}", documents="posts/{post}",
                       extension=Extension(field="stats.likes", by=(0, 1))),
           Declaration(counter="views:{post}", documents="posts/{post}",
                       extension=Extension(field="views", by=(1, 5)))]
    text = rules.extension_rules(two)
    assert "match /posts/{post}/_counter_shards_/{extensionShard}" in text
    assert ("extensionKeys(request.resource.data, resource == null ? {} : resource.data, "
            "['stats', 'views'])") in text
    assert ("resource == null ? {} : resource.data.get(['stats'], {}), ['likes'])") in text
    assert "extensionField(['stats', 'likes'], 0, 1)" in text
    assert "extensionField(['views'], 1, 5)" in text
    assert "exists(/databases/$(database)/documents/posts/$(post))" in text
    assert "function extensionField" not in rules.extension_rules([])
    # Two fields in one map: its check lists both.
    siblings = rules.extension_rules([
        Declaration(counter="likes:{post}", documents="posts/{post}",
                    extension=Extension(field="stats.likes", by=(0, 1))),
        Declaration(counter="shares:{post}", documents="posts/{post}",
                    extension=Extension(field="stats.shares", by=(0, 1)))])
    assert "resource.data.get(['stats'], {}), ['likes', 'shares'])" in siblings
    assert "['likes'])" not in siblings


def test_shards_create_their_document_only_when_every_declaration_over_it_says_so() -> None:
    def rule(*creates: bool) -> str:
        return rules.extension_rules([
            Declaration(counter=f"c{n}:{{post}}", documents="posts/{post}",
                        extension=Extension(field=f"f{n}", by=(0, 1), create_documents=create))
            for n, create in enumerate(creates)])

    assert "exists(" in rule(False) and "exists(" in rule(True, False)
    assert "exists(" not in rule(True, True)


def test_the_extensions_own_shard_rule_is_found_and_ours_is_not() -> None:
    assert rules.old_shard_rules(POSTINSTALL) == ["line 5: match /_counter_shards_/{shardId}"]
    ours = "service cloud.firestore {\n  match /databases/{database}/documents {\n" \
        + rules.extension_rules(OWN.declarations) + "  }\n}\n"
    assert rules.old_shard_rules(ours) == []
    read_only = POSTINSTALL.replace("allow write:", "allow read:")
    assert rules.old_shard_rules(read_only) == []
    commented = POSTINSTALL.replace("      allow write", "      // allow write").replace(
        "                     &&", "                     // &&").replace(
        "                     resource.data.visits + 1);", "")
    assert rules.old_shard_rules(commented) == []
    below = "match /{p=**}/_counter_shards_/{id} { match /x/{y} { allow create: if true; } }"
    assert rules.old_shard_rules(below) == []  # a collection under a shard: not the shard
    everything = "match /databases/{database}/documents {\n  match /{document=**} {\n" \
        "    allow read, write: if request.auth != null;\n  }\n}\n"
    assert rules.old_shard_rules(everything) == ["line 2: match /{document=**}"]
    assert rules.old_shard_rules(everything.replace("read, write", "read")) == []
