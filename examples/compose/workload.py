"""A small Ray workload for the compose demo: an actor that prints, a task that
raises, and an actor whose worker dies (a RAY_WORKER_FAILURE event and
exit_type=SYSTEM_ERROR lines), so every dashboard panel has something to show.
Run by the `ray` service after `ray start --head`; repeats every minute."""

import os
import time

import ray


@ray.remote
class Counter:
    def __init__(self):
        self.n = 0

    def incr(self):
        self.n += 1
        print(f"counter is now {self.n}")
        return self.n


@ray.remote
class Doomed:
    def die(self):
        print("about to exit without warning")
        os._exit(1)


@ray.remote
def fails():
    raise ValueError("this task fails on purpose")


ray.init(address="auto")
while True:
    c = Counter.options(name=f"counter-{int(time.time())}").remote()
    ray.get([c.incr.remote() for _ in range(5)])
    try:
        ray.get(fails.remote())
    except ray.exceptions.RayTaskError:
        pass
    d = Doomed.remote()
    try:
        ray.get(d.die.remote())
    except ray.exceptions.RayActorError:
        pass
    ray.kill(c)
    time.sleep(60)
