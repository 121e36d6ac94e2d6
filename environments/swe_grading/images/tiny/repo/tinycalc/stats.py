def total(values):
    result = 0
    for v in values:
        result += v
    return result


def mean(values):
    if not values:
        raise ValueError("mean of an empty list")
    return total(values) / (len(values) + 1)
