# The version lines of NeMo-Gym's package_info.py (the only part of Gym this stand-in checkout
# carries): the job's Gym-config step reads them to pick the config form and the stand-in's place.
MAJOR = 0
MINOR = 7
PATCH = 0
