"""The tiny-alfworld vocabulary, built from the game files alone, reads what the games really show."""

from __future__ import annotations

import json

import pytest

from env_bridge.games import SPLITS, discover_games
from env_bridge.vocabulary import split_words
from ggtrain.policies.tiny_alfworld import TAGS, alfworld_tokenizer


def test_every_walkthrough_command_of_every_shipped_game_is_in_the_vocabulary():
    tokenizer = alfworld_tokenizer()
    games = [g for split in SPLITS for g in discover_games(split, include_unsolvable=True)]
    assert len(games) == 140 + 134 + 1770
    words = {w for g in games for c in json.loads(g.path.read_text())["walkthrough"] for w in split_words(c)}
    missing = sorted(w for w in words if tokenizer.token_to_id(w) is None)
    assert not missing, missing


def test_played_observations_and_admissible_commands_have_no_unknown_word(walkthrough_turns):
    tokenizer = alfworld_tokenizer()
    unk = tokenizer.token_to_id("[UNK]")
    texts = [r["messages"][0]["content"] for r in walkthrough_turns] + [r["response"] for r in walkthrough_turns]
    for text in texts:
        ids = tokenizer.encode(text, add_special_tokens=False)
        assert unk not in ids, [w for w in split_words(text) if tokenizer.token_to_id(w) is None]


def test_unknown_words_are_the_unknown_token_and_tags_are_single_tokens():
    tokenizer = alfworld_tokenizer()
    unk = tokenizer.token_to_id("[UNK]")
    assert tokenizer.encode("go to the zebra 1", add_special_tokens=False)[3] == unk
    ids = tokenizer.encode("<think></think><action>go to sofa 1</action>", add_special_tokens=False)
    assert [tokenizer.token_to_id(t) for t in TAGS] == [ids[0], ids[1], ids[2], ids[-1]]
    assert tokenizer.decode(ids) == "<think> </think> <action> go to sofa 1 </action>"
    assert alfworld_tokenizer().backend.get_vocab() == tokenizer.backend.get_vocab()  # deterministic ids


def test_the_tracked_state_line_has_no_unknown_word(walkthrough_turns):
    from ggtrain.sft_data import tracked_state

    tokenizer = alfworld_tokenizer()
    unk = tokenizer.token_to_id("[UNK]")
    lines = {tracked_state(r) for r in walkthrough_turns}
    assert any("(unprocessed)" in line for line in lines)  # something was held
    for line in lines:
        assert unk not in tokenizer.encode(line, add_special_tokens=False), line


def test_the_shipped_build_has_the_tokenizer_built_now():
    """The shipped weights' token ids are the ids a fresh build of the vocabulary gives (a changed vocabulary
    changes the recipe hash too, ggtrain.policies.tiny_alfworld.later_inputs)."""
    from ggtrain.policies.tiny_alfworld import shipped_dir
    from models.zoo import WORD_LEVEL_CHAT_TEMPLATE

    shipped = shipped_dir()
    assert json.loads((shipped / "tokenizer.json").read_text()) == json.loads(alfworld_tokenizer().backend.to_str())
    assert json.loads((shipped / "tokenizer_config.json").read_text())["chat_template"] == WORD_LEVEL_CHAT_TEMPLATE


@pytest.mark.slow
def test_every_state_of_the_evaluation_games_walkthroughs_reads_without_an_unknown_word():
    """What the engine shows, not what the vocabulary was read from: at every state the expert passes
    through in all 274 evaluation games, the observation and every admissible command there (the commands
    no expert uses too: examine, use, other places)."""
    from env_bridge.demonstrations import walkthrough_demonstrations
    from env_bridge.prompts import prompt_builder

    tokenizer = alfworld_tokenizer()
    games = [g for split in ("valid_seen", "valid_unseen") for g in discover_games(split)]
    assert len(games) == 140 + 134
    states, unknown = 0, set()
    for records in walkthrough_demonstrations(games, prompt_builder("tags", 1, True), "tags", workers=2):
        for r in records:
            states += 1
            for text in [r["observation"], *r["admissible"]]:
                unknown |= {w for w in split_words(text) if tokenizer.token_to_id(w) is None}
    assert states >= 274 * 3  # every walkthrough played, several states each
    assert not unknown, sorted(unknown)
