#!/usr/bin/env python3
"""A stand-in for LSF's blaunch, on PATH in the blaunch tests: `blaunch [-n] host command [args]`.
It appends how it was called (argv, and whether HOROVOD_SECRET_KEY is in it) as a JSON line to
$FAKE_BLAUNCH_LOG, then runs the command as blaunch does, through /bin/sh on that host: inside
the network namespace $FAKE_BLAUNCH_NETNS maps the host to ("host=ns,host=ns"), else on this
machine. Like blaunch, it forwards its stdin to the task (-n: /dev/null instead) and exits with
the task's status. Other blaunch forms (-z, -u) are refused with status 2."""

import json
import os
import sys


def main(argv):
    args = argv[1:]
    no_stdin = bool(args) and args[0] == '-n'
    if no_stdin:
        args = args[1:]
    if len(args) < 2 or args[0].startswith('-'):
        sys.stderr.write('fake blaunch: usage: blaunch [-n] host command [args]; got {}\n'.format(argv[1:]))
        return 2
    host, command = args[0], ' '.join(args[1:])
    with open(os.environ['FAKE_BLAUNCH_LOG'], 'a') as log:
        log.write(json.dumps({'argv': argv, 'host': host, 'lsb_jobid': os.environ.get('LSB_JOBID'),
                              'secret_in_argv': any('HOROVOD_SECRET_KEY=' in a for a in argv)}) + '\n')
    netns = dict(item.split('=', 1) for item in os.environ.get('FAKE_BLAUNCH_NETNS', '').split(',') if item)
    if no_stdin:
        fd = os.open(os.devnull, os.O_RDONLY)
        os.dup2(fd, 0)
    shell = ['/bin/sh', '-c', command]
    if host in netns:
        os.execvp('ip', ['ip', 'netns', 'exec', netns[host]] + shell)
    os.execv('/bin/sh', shell)


if __name__ == '__main__':
    sys.exit(main(sys.argv))
