"""A dense partial-credit reward for the tiny random model (whose task rewards are all 0, giving zero advantages)."""


def digit_fraction(completion: str, reference) -> float:
    """Share of ASCII digits in the completion: varies across random samples, so GRPO advantages are non-zero."""
    return sum(c.isascii() and c.isdigit() for c in completion) / len(completion) if completion else 0.0


def raises_on_digits(completion: str, reference) -> float:
    """A careless user reward: raises on any completion with a digit, else 1."""
    if any(c.isdigit() for c in completion):
        raise ValueError("no digits please")
    return 1.0



def length_fraction(completion: str, reference) -> float:
    """Completion length over 64 characters: > 0 for any output, even the random tiny model's."""
    return min(1.0, len(completion) / 64)


def even_length(completion: str, reference) -> float:
    """1 when the completion has an even number of characters: a coin flip per random sample, for A/A checks."""
    return float(len(completion) % 2 == 0)
