"""Try TCP ports of a host and print what each does, as JSON.

open: something accepted; refused: the host answered with a reset (nothing
listens, no firewall in the way); filtered: no answer at all within the
timeout (a firewall dropped the SYN, or nothing routes there).

    python3 probe_ports.py HOST PORT [PORT ...] [--timeout S]
"""

import argparse
import json
import socket
from concurrent.futures import ThreadPoolExecutor


def probe(host, port, timeout):
    sock = socket.socket(socket.AF_INET6 if ':' in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect((host, port))
        return 'open'
    except socket.timeout:
        return 'filtered'
    except ConnectionRefusedError:
        return 'refused'
    except OSError as err:
        # No route, host unreachable (an ICMP answer): not a silent drop.
        return 'unreachable:%s' % err.errno
    finally:
        sock.close()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('host')
    parser.add_argument('ports', nargs='+', type=int)
    parser.add_argument('--timeout', type=float, default=2.0)
    args = parser.parse_args()
    # All at once: a filtered port costs the whole timeout.
    with ThreadPoolExecutor(max_workers=len(args.ports)) as pool:
        results = pool.map(lambda port: probe(args.host, port, args.timeout), args.ports)
    print(json.dumps(dict(zip(map(str, args.ports), results))))


if __name__ == '__main__':
    main()
