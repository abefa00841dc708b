"""What the peer benchmarks share: this process's memory from /proc/self/status, in MiB.

Peak memory is VmHWM, the high water mark of this address space. getrusage's ru_maxrss is not used:
Linux carries it across execve, so a child started by a process that had imported torch would report
that parent's peak.
"""


def status_mib(key):
    """The /proc/self/status field `key` ("VmRSS", "VmHWM") in MiB, or nan when it cannot be read."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return float("nan")


def peak_rss_mib():
    return status_mib("VmHWM")


def rss_now_mib():
    return status_mib("VmRSS")
