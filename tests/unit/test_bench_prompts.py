"""The benchmark prompt: deterministic generated prose, multi-turn, hits the token target."""

from llamaforge.bench.prompts import FINAL_REQUEST, build_messages, build_prompt, sentences


def _tok(text):
    return text.split()


def _tmpl(msgs):
    return "".join(f"<|{m['role']}|>{m['content']}" for m in msgs)


def test_story_is_deterministic_and_grows_by_prefix():
    assert sentences(30) == sentences(30)
    assert sentences(50)[:30] == sentences(30)
    assert sentences(5, seed=1) != sentences(5, seed=0)


def test_messages_are_a_multi_turn_chat_ending_in_the_request():
    msgs = build_messages(40)
    roles = [m["role"] for m in msgs]
    assert roles[0] == "system" and roles[-1] == "user" and msgs[-1]["content"] == FINAL_REQUEST
    assert roles.count("assistant") >= 3
    assert all(a != b for a, b in zip(roles[1:], roles[2:], strict=False))


def test_prompt_is_the_longest_story_within_the_target():
    for target in (300, 2500):
        p = build_prompt(target, tokenize=_tok, apply_template=_tmpl)
        assert p.n_tokens <= target
        longer = build_messages(p.n_sentences + 1)
        assert len(_tok(_tmpl(longer))) > target
        assert p.templated and p.tokens == _tok(p.text)


def test_models_without_a_chat_template_get_a_plain_rendering():
    p = build_prompt(400, tokenize=_tok, apply_template=lambda m: None)
    assert not p.templated and p.text.startswith("System:") and p.n_tokens <= 400


def test_a_target_shorter_than_the_chat_frame_gets_exactly_that_many_tokens_of_plain_story():
    frame = len(_tok(_tmpl(build_messages(0))))
    for target in (1, 5, frame - 1):
        p = build_prompt(target, tokenize=_tok, apply_template=_tmpl)
        assert p.n_tokens == target and p.cut and not p.templated, (target, p.n_tokens)
        assert p.tokens == _tok(p.text)[:target] and p.to_dict()["cut"] is True
    p = build_prompt(frame, tokenize=_tok, apply_template=_tmpl)
    assert p.n_tokens == frame and p.templated and not p.cut and "cut" not in p.to_dict()
