"""matrix.yaml: pydantic models, loading with file:line:column errors, and target expansion.

Every error names the place in the file, the key path and what was expected, so a typo never turns into a
silently different image. Strings are restricted to characters that cannot become Dockerfile syntax.

One fact per module: `fields` (the string types and their validators), `sources` (git / URL / repository path,
`Strict`), `models` (the sections), `runtimes` (TGI and pip runtimes), `loader` (bounded YAML with positions),
`located` (validation errors said at file:line:column), `targets` (cross-checks and expansion), `pins` (what is
not pinned), `load` (the loaded `Matrix`). The names are re-exported here, so `from imagebuild.matrix import X`
is the way in.
"""

from imagebuild.matrix.fields import MAX_TEXT as MAX_TEXT
from imagebuild.matrix.fields import AbsPath as AbsPath
from imagebuild.matrix.fields import AptPackage as AptPackage
from imagebuild.matrix.fields import ArchForm as ArchForm
from imagebuild.matrix.fields import ArchName as ArchName
from imagebuild.matrix.fields import ArchVariable as ArchVariable
from imagebuild.matrix.fields import AttentionKey as AttentionKey
from imagebuild.matrix.fields import Backend as Backend
from imagebuild.matrix.fields import Commit as Commit
from imagebuild.matrix.fields import Digest as Digest
from imagebuild.matrix.fields import EnvName as EnvName
from imagebuild.matrix.fields import FileName as FileName
from imagebuild.matrix.fields import GitRef as GitRef
from imagebuild.matrix.fields import HostPath as HostPath
from imagebuild.matrix.fields import HttpPath as HttpPath
from imagebuild.matrix.fields import ImageName as ImageName
from imagebuild.matrix.fields import LocalVersion as LocalVersion
from imagebuild.matrix.fields import Name as Name
from imagebuild.matrix.fields import PinnedRequirement as PinnedRequirement
from imagebuild.matrix.fields import PipRequirement as PipRequirement
from imagebuild.matrix.fields import PlatformKind as PlatformKind
from imagebuild.matrix.fields import Program as Program
from imagebuild.matrix.fields import RepoPath as RepoPath
from imagebuild.matrix.fields import Sha256 as Sha256
from imagebuild.matrix.fields import TargetName as TargetName
from imagebuild.matrix.fields import Text as Text
from imagebuild.matrix.fields import TorchKey as TorchKey
from imagebuild.matrix.fields import Url as Url
from imagebuild.matrix.fields import Version as Version
from imagebuild.matrix.fields import excerpt as excerpt
from imagebuild.matrix.load import Matrix as Matrix
from imagebuild.matrix.load import json_schema as json_schema
from imagebuild.matrix.load import load_matrix as load_matrix
from imagebuild.matrix.load import load_text as load_text
from imagebuild.matrix.load import validate as validate
from imagebuild.matrix.loader import MAX_DEPTH as MAX_DEPTH
from imagebuild.matrix.loader import MAX_MATRIX_BYTES as MAX_MATRIX_BYTES
from imagebuild.matrix.loader import MAX_NODES as MAX_NODES
from imagebuild.matrix.loader import KeyPath as KeyPath
from imagebuild.matrix.loader import _BoundedLoader as _BoundedLoader
from imagebuild.matrix.loader import _build as _build
from imagebuild.matrix.loader import _check_expansion as _check_expansion
from imagebuild.matrix.loader import _Positions as _Positions
from imagebuild.matrix.loader import format_path as format_path
from imagebuild.matrix.loader import parse_text as parse_text
from imagebuild.matrix.models import Axes as Axes
from imagebuild.matrix.models import Combo as Combo
from imagebuild.matrix.models import Companion as Companion
from imagebuild.matrix.models import Component as Component
from imagebuild.matrix.models import MatrixModel as MatrixModel
from imagebuild.matrix.models import Platform as Platform
from imagebuild.matrix.models import Settings as Settings
from imagebuild.matrix.models import TargetGroup as TargetGroup
from imagebuild.matrix.models import Torch as Torch
from imagebuild.matrix.models import TorchBuild as TorchBuild
from imagebuild.matrix.models import TunableOp as TunableOp
from imagebuild.matrix.pins import Unpinned as Unpinned
from imagebuild.matrix.runtimes import RUNTIME_KINDS as RUNTIME_KINDS
from imagebuild.matrix.runtimes import PipRuntime as PipRuntime
from imagebuild.matrix.runtimes import Runtime as Runtime
from imagebuild.matrix.runtimes import TgiAttention as TgiAttention
from imagebuild.matrix.runtimes import TgiRuntime as TgiRuntime
from imagebuild.matrix.runtimes import TgiServer as TgiServer
from imagebuild.matrix.sources import Patch as Patch
from imagebuild.matrix.sources import Source as Source
from imagebuild.matrix.sources import Strict as Strict
from imagebuild.matrix.targets import MAX_TAG as MAX_TAG
from imagebuild.matrix.targets import Target as Target
