"""Writes tasks/data/testfile_basics.jsonl: small Python functions, each graded by its own test
file (kind `testfile`: a pytest module, or MBPP-style assert lines), at the level a small
instruct model half-solves (a line or a short loop, with an edge case the tests check). This
script is the set's source; the .jsonl is what a run reads (`file:` of a task source).

    .venv/bin/python tasks/data/build_testfile_basics.py
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tasks.files import save_tasks  # noqa: E402
from tasks.record import Task  # noqa: E402

OUT = Path(__file__).with_name("testfile_basics.jsonl")

# (family, difficulty, signature, docstring with one example, reference body, format, tests)
# pytest tests: the body of a test module after `from solution import <name>`;
# asserts: one `assert` per line.
SPECS = [
    ("strings", 1, "def shout(s):", '''Return s in upper case followed by an exclamation mark.

    >>> shout("hi")
    'HI!'
    ''', "    return s.upper() + \"!\"\n", "pytest", '''
def test_word():
    assert shout("hi") == "HI!"


def test_empty():
    assert shout("") == "!"


def test_mixed():
    assert shout("Go on") == "GO ON!"
'''),
    ("strings", 1, "def first_char(s):", '''Return the first character of s, or "" when s is empty.

    >>> first_char("cat")
    'c'
    ''', "    return s[:1]\n", "asserts", '''assert first_char("cat") == "c"
assert first_char("") == ""
assert first_char("Z") == "Z"
'''),
    ("strings", 1, "def repeat_word(word, n):", '''Return word repeated n times, separated by single spaces.

    >>> repeat_word("go", 3)
    'go go go'
    ''', "    return \" \".join([word] * n)\n", "pytest", '''
def test_three():
    assert repeat_word("go", 3) == "go go go"


def test_once():
    assert repeat_word("hey", 1) == "hey"


def test_zero():
    assert repeat_word("hey", 0) == ""
'''),
    ("strings", 1, "def count_char(s, c):", '''Return how many times the character c occurs in s.

    >>> count_char("banana", "a")
    3
    ''', "    return s.count(c)\n", "asserts", '''assert count_char("banana", "a") == 3
assert count_char("banana", "z") == 0
assert count_char("", "a") == 0
assert count_char("AaA", "A") == 2
'''),
    ("strings", 2, "def initials(name):", '''Return the upper-case initials of the words of name, joined with no separator.

    >>> initials("ada lovelace")
    'AL'
    ''', "    return \"\".join(w[0].upper() for w in name.split())\n", "pytest", '''
def test_two_words():
    assert initials("ada lovelace") == "AL"


def test_three_words():
    assert initials("grace brewster hopper") == "GBH"


def test_extra_spaces():
    assert initials("  alan   turing ") == "AT"


def test_empty():
    assert initials("") == ""
'''),
    ("strings", 2, "def remove_vowels(s):", '''Return s without its vowels (a, e, i, o, u, in either case).

    >>> remove_vowels("Hello")
    'Hll'
    ''', "    return \"\".join(c for c in s if c.lower() not in \"aeiou\")\n", "pytest", '''
import pytest


@pytest.mark.parametrize("s, out", [("Hello", "Hll"), ("AEIOU", ""), ("xyz", "xyz"), ("", "")])
def test_examples(s, out):
    assert remove_vowels(s) == out
'''),
    ("strings", 2, "def is_anagram(a, b):", '''Return True if a and b use the same letters the same number of times, else False.

    >>> is_anagram("listen", "silent")
    True
    ''', "    return sorted(a) == sorted(b)\n", "pytest", '''
def test_yes():
    assert is_anagram("listen", "silent") is True


def test_no():
    assert is_anagram("abc", "abd") is False


def test_counts_matter():
    assert is_anagram("aab", "abb") is False


def test_empty():
    assert is_anagram("", "") is True
'''),
    ("strings", 2, "def longest_word(s):", '''Return the longest word of s (words are separated by spaces); the first one on a tie.

    >>> longest_word("a quick fox")
    'quick'
    ''', "    return max(s.split(), key=len)\n", "asserts", '''assert longest_word("a quick fox") == "quick"
assert longest_word("one two six") == "one"
assert longest_word("hello") == "hello"
'''),
    ("strings", 2, "def capitalize_words(s):", '''Return s with the first letter of every space-separated word in upper case.

    >>> capitalize_words("hello world")
    'Hello World'
    ''', "    return \" \".join(w[:1].upper() + w[1:] for w in s.split(\" \"))\n", "pytest", '''
def test_two():
    assert capitalize_words("hello world") == "Hello World"


def test_keeps_rest():
    assert capitalize_words("mcDonald farm") == "McDonald Farm"


def test_one():
    assert capitalize_words("x") == "X"
'''),
    ("lists", 1, "def double_all(xs):", '''Return a new list with every number of xs doubled.

    >>> double_all([1, 2, 3])
    [2, 4, 6]
    ''', "    return [2 * x for x in xs]\n", "pytest", '''
def test_numbers():
    assert double_all([1, 2, 3]) == [2, 4, 6]


def test_empty():
    assert double_all([]) == []


def test_does_not_change_input():
    xs = [5]
    double_all(xs)
    assert xs == [5]
'''),
    ("lists", 1, "def first_or_none(xs):", '''Return the first element of xs, or None when xs is empty.

    >>> first_or_none([4, 5])
    4
    ''', "    return xs[0] if xs else None\n", "asserts", '''assert first_or_none([4, 5]) == 4
assert first_or_none([]) is None
assert first_or_none([0]) == 0
'''),
    ("lists", 1, "def count_positive(xs):", '''Return how many numbers in xs are greater than zero.

    >>> count_positive([1, -2, 3, 0])
    2
    ''', "    return sum(1 for x in xs if x > 0)\n", "pytest", '''
def test_mixed():
    assert count_positive([1, -2, 3, 0]) == 2


def test_zero_is_not_positive():
    assert count_positive([0, 0]) == 0


def test_empty():
    assert count_positive([]) == 0
'''),
    ("lists", 1, "def list_sum(xs):", '''Return the sum of the numbers in xs (0 for an empty list).

    >>> list_sum([1, 2, 3])
    6
    ''', "    return sum(xs)\n", "asserts", '''assert list_sum([1, 2, 3]) == 6
assert list_sum([]) == 0
assert list_sum([-1, 1]) == 0
'''),
    ("lists", 2, "def remove_duplicates(xs):", '''Return the elements of xs without repeats, in the order of their first occurrence.

    >>> remove_duplicates([3, 1, 3, 2, 1])
    [3, 1, 2]
    ''', "    return list(dict.fromkeys(xs))\n", "pytest", '''
def test_order_kept():
    assert remove_duplicates([3, 1, 3, 2, 1]) == [3, 1, 2]


def test_no_repeats():
    assert remove_duplicates([1, 2]) == [1, 2]


def test_empty():
    assert remove_duplicates([]) == []
'''),
    ("lists", 2, "def second_largest(xs):", '''Return the second largest distinct number in xs (xs holds at least two distinct numbers).

    >>> second_largest([4, 1, 7, 3])
    4
    ''', "    return sorted(set(xs))[-2]\n", "pytest", '''
def test_simple():
    assert second_largest([4, 1, 7, 3]) == 4


def test_repeated_max():
    assert second_largest([7, 7, 2]) == 2


def test_negative():
    assert second_largest([-5, -1, -3]) == -3
'''),
    ("lists", 2, "def running_total(xs):", '''Return the list of running totals of xs: element i is the sum of xs[0..i].

    >>> running_total([1, 2, 3])
    [1, 3, 6]
    ''', '''    out, total = [], 0
    for x in xs:
        total += x
        out.append(total)
    return out
''', "pytest", '''
def test_simple():
    assert running_total([1, 2, 3]) == [1, 3, 6]


def test_empty():
    assert running_total([]) == []


def test_negative():
    assert running_total([5, -5, 2]) == [5, 0, 2]
'''),
    ("lists", 2, "def chunk(xs, n):", '''Split xs into consecutive lists of n elements; the last one may be shorter.

    >>> chunk([1, 2, 3, 4, 5], 2)
    [[1, 2], [3, 4], [5]]
    ''', "    return [xs[i:i + n] for i in range(0, len(xs), n)]\n", "asserts", '''assert chunk([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]
assert chunk([1, 2, 3], 3) == [[1, 2, 3]]
assert chunk([], 2) == []
'''),
    ("lists", 2, "def flatten(xss):", '''Return one list with the elements of the lists in xss, in order.

    >>> flatten([[1, 2], [3], []])
    [1, 2, 3]
    ''', "    return [x for xs in xss for x in xs]\n", "pytest", '''
def test_simple():
    assert flatten([[1, 2], [3], []]) == [1, 2, 3]


def test_empty():
    assert flatten([]) == []


def test_strings_are_elements():
    assert flatten([["ab"], ["c"]]) == ["ab", "c"]
'''),
    ("lists", 2, "def index_of_max(xs):", '''Return the index of the largest number in the non-empty list xs (the first one on a tie).

    >>> index_of_max([3, 9, 2])
    1
    ''', "    return xs.index(max(xs))\n", "asserts", '''assert index_of_max([3, 9, 2]) == 1
assert index_of_max([5]) == 0
assert index_of_max([2, 8, 8]) == 1
assert index_of_max([-3, -1, -2]) == 1
'''),
    ("math", 1, "def is_even(n):", '''Return True if the integer n is even, else False.

    >>> is_even(4)
    True
    ''', "    return n % 2 == 0\n", "pytest", '''
def test_even():
    assert is_even(4) is True


def test_odd():
    assert is_even(7) is False


def test_zero_and_negative():
    assert is_even(0) is True
    assert is_even(-3) is False
'''),
    ("math", 1, "def square(x):", '''Return x multiplied by itself.

    >>> square(3)
    9
    ''', "    return x * x\n", "asserts", '''assert square(3) == 9
assert square(-4) == 16
assert square(0) == 0
'''),
    ("math", 1, "def average(xs):", '''Return the mean of the numbers in the non-empty list xs.

    >>> average([1, 2, 3])
    2.0
    ''', "    return sum(xs) / len(xs)\n", "pytest", '''
import pytest


def test_whole():
    assert average([1, 2, 3]) == 2.0


def test_fraction():
    assert average([1, 2]) == pytest.approx(1.5)


def test_one():
    assert average([7]) == 7
'''),
    ("math", 2, "def factorial(n):", '''Return n! for an integer n >= 0 (0! is 1).

    >>> factorial(4)
    24
    ''', '''    out = 1
    for k in range(2, n + 1):
        out *= k
    return out
''', "pytest", '''
import pytest


@pytest.mark.parametrize("n, out", [(0, 1), (1, 1), (4, 24), (6, 720)])
def test_values(n, out):
    assert factorial(n) == out
'''),
    ("math", 2, "def digit_sum(n):", '''Return the sum of the decimal digits of the integer n (its sign ignored).

    >>> digit_sum(123)
    6
    ''', "    return sum(int(d) for d in str(abs(n)))\n", "asserts", '''assert digit_sum(123) == 6
assert digit_sum(0) == 0
assert digit_sum(-45) == 9
assert digit_sum(1000) == 1
'''),
    ("math", 2, "def is_prime(n):", '''Return True if the integer n is a prime number, else False.

    >>> is_prime(7)
    True
    ''', '''    if n < 2:
        return False
    k = 2
    while k * k <= n:
        if n % k == 0:
            return False
        k += 1
    return True
''', "pytest", '''
import pytest


@pytest.mark.parametrize("n", [2, 3, 13, 97])
def test_primes(n):
    assert is_prime(n) is True


@pytest.mark.parametrize("n", [-7, 0, 1, 4, 91])
def test_not_primes(n):
    assert is_prime(n) is False
'''),
    ("math", 2, "def gcd(a, b):", '''Return the greatest common divisor of the positive integers a and b.

    >>> gcd(12, 18)
    6
    ''', '''    while b:
        a, b = b, a % b
    return a
''', "asserts", '''assert gcd(12, 18) == 6
assert gcd(7, 5) == 1
assert gcd(10, 10) == 10
assert gcd(3, 9) == 3
'''),
    ("math", 2, "def fizzbuzz(n):", '''Return "FizzBuzz" if n is divisible by 15, "Fizz" if by 3, "Buzz" if by 5, else str(n).

    >>> fizzbuzz(9)
    'Fizz'
    ''', '''    if n % 15 == 0:
        return "FizzBuzz"
    if n % 3 == 0:
        return "Fizz"
    if n % 5 == 0:
        return "Buzz"
    return str(n)
''', "pytest", '''
def test_fizz():
    assert fizzbuzz(9) == "Fizz"


def test_buzz():
    assert fizzbuzz(10) == "Buzz"


def test_fizzbuzz():
    assert fizzbuzz(30) == "FizzBuzz"


def test_number():
    assert fizzbuzz(7) == "7"
'''),
    ("dicts", 1, "def get_or_zero(d, key):", '''Return d[key], or 0 when key is not in the dictionary d.

    >>> get_or_zero({"a": 2}, "a")
    2
    ''', "    return d.get(key, 0)\n", "asserts", '''assert get_or_zero({"a": 2}, "a") == 2
assert get_or_zero({"a": 2}, "b") == 0
assert get_or_zero({}, "a") == 0
'''),
    ("dicts", 1, "def invert(d):", '''Return a new dictionary mapping each value of d to its key (the values are distinct).

    >>> invert({"a": 1, "b": 2})
    {1: 'a', 2: 'b'}
    ''', "    return {v: k for k, v in d.items()}\n", "pytest", '''
def test_simple():
    assert invert({"a": 1, "b": 2}) == {1: "a", 2: "b"}


def test_empty():
    assert invert({}) == {}
'''),
    ("dicts", 2, "def word_counts(s):", '''Return a dictionary mapping each space-separated word of s to how often it occurs.

    >>> word_counts("a b a")
    {'a': 2, 'b': 1}
    ''', '''    counts = {}
    for w in s.split():
        counts[w] = counts.get(w, 0) + 1
    return counts
''', "pytest", '''
def test_repeats():
    assert word_counts("a b a") == {"a": 2, "b": 1}


def test_empty():
    assert word_counts("") == {}


def test_case_sensitive():
    assert word_counts("A a") == {"A": 1, "a": 1}
'''),
    ("dicts", 2, "def key_of_max(d):", '''Return the key of the largest value in the non-empty dictionary d.

    >>> key_of_max({"x": 1, "y": 5})
    'y'
    ''', "    return max(d, key=d.get)\n", "asserts", '''assert key_of_max({"x": 1, "y": 5}) == "y"
assert key_of_max({"only": -2}) == "only"
assert key_of_max({"a": 3, "b": 2, "c": 1}) == "a"
'''),
    ("dicts", 2, "def group_by_length(words):", '''Return a dictionary mapping each word length to the list of words of that length, in order.

    >>> group_by_length(["hi", "to", "sea"])
    {2: ['hi', 'to'], 3: ['sea']}
    ''', '''    groups = {}
    for w in words:
        groups.setdefault(len(w), []).append(w)
    return groups
''', "pytest", '''
def test_simple():
    assert group_by_length(["hi", "to", "sea"]) == {2: ["hi", "to"], 3: ["sea"]}


def test_empty():
    assert group_by_length([]) == {}


def test_order_kept():
    assert group_by_length(["b", "a"]) == {1: ["b", "a"]}
'''),
]

# One task in four held out (every fourth, so each family has some): a run may re-split them
# (`heldout_fraction` of the source).
HELDOUT_EVERY = 4


def tasks() -> list[Task]:
    out = []
    for i, (family, level, sig, doc, ref, fmt, tests) in enumerate(SPECS):
        name = sig[len("def "):sig.index("(")]
        test_file = tests.lstrip("\n") if fmt == "asserts" else \
            f"from solution import {name}\n\n{tests}"
        out.append(Task(
            task_id=f"testfile-basics/{name}", suite="testfile-basics", family=family,
            difficulty=level, split="heldout" if i % HELDOUT_EVERY == HELDOUT_EVERY - 1 else "train",
            prompt=f'{sig}\n    """{doc}"""\n', kind="testfile", entry_point=name,
            reference=ref, payload={"test_file": test_file, "format": fmt}))
    return out


if __name__ == "__main__":
    print(save_tasks(tasks(), OUT))
