"""tasks: a team's projects and tasks, with assignees, due dates, priorities, dependencies and comments.

The agent acts as one workspace member (`state.me`). Tasks move between "todo", "in_progress", "done"
and "cancelled". A task can depend on other tasks of its project; it can only be done once every task it
depends on is done or cancelled, and dependencies never form a cycle. Archived projects are read-only
and hold no open task. Only a project's owner or a workspace owner/admin can archive it. Members are
identified to other tools by their email addresses (the `.example` addresses used across environments).
"""

from __future__ import annotations

from datetime import date
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, NaiveDatetime, model_validator

from envreg.env import Environment, EnvState, ToolError, fold, id_problems, lookup, matches

Role = Literal["owner", "admin", "member", "guest"]
Status = Literal["todo", "in_progress", "done", "cancelled"]
Priority = Literal["low", "medium", "high", "urgent"]

Id = Annotated[str, Field(max_length=64)]
Email = Annotated[str, Field(pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$", max_length=254)]
Title = Annotated[str, Field(min_length=1, max_length=200)]
Text = Annotated[str, Field(max_length=5000)]
Label = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]{0,29}$", max_length=30)]
Labels = Annotated[list[Label], Field(max_length=10)]

OPEN: frozenset[str] = frozenset({"todo", "in_progress"})
CLOSED: frozenset[str] = frozenset({"done", "cancelled"})
PRIORITY_RANK = {"urgent": 0, "high": 1, "medium": 2, "low": 3}
MAX_TASKS = 2000
MAX_PROJECTS = 200
MAX_COMMENTS = 200
MAX_DEPENDENCIES = 20


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Member(_Model):
    """A person in the workspace."""

    id: Annotated[str, Field(pattern=r"^mem_\d{4,}$", max_length=64)]
    name: Annotated[str, Field(min_length=1, max_length=200)]
    email: Email
    role: Role
    active: bool = True


class Project(_Model):
    id: Annotated[str, Field(pattern=r"^prj_\d{4,}$", max_length=64)]
    name: Title
    description: Text = ""
    owner_id: Id
    status: Literal["active", "archived"] = "active"
    created_at: NaiveDatetime
    archived_at: NaiveDatetime | None = None

    @model_validator(mode="after")
    def _archived(self) -> Project:
        if (self.status == "archived") != (self.archived_at is not None):
            raise ValueError(f"project {self.id}: archived_at must be set exactly when it is archived")
        return self


class Comment(_Model):
    id: Annotated[str, Field(pattern=r"^cmt_\d{4,}$", max_length=64)]
    author_id: Id
    text: Annotated[str, Field(min_length=1, max_length=4000)]
    created_at: NaiveDatetime


class Task(_Model):
    id: Annotated[str, Field(pattern=r"^tsk_\d{4,}$", max_length=64)]
    project_id: Id
    title: Title
    description: Text = ""
    status: Status = "todo"
    priority: Priority = "medium"
    assignee_id: Id | None = None
    due_date: date | None = None
    labels: Labels = Field(default_factory=list)
    depends_on: Annotated[list[Id], Field(max_length=MAX_DEPENDENCIES)] = Field(
        default_factory=list,
        description="Tasks of the same project that must be closed before this one is done.",
    )
    created_at: NaiveDatetime
    updated_at: NaiveDatetime
    completed_at: NaiveDatetime | None = None
    comments: Annotated[list[Comment], Field(max_length=MAX_COMMENTS)] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> Task:
        if (self.status == "done") != (self.completed_at is not None):
            raise ValueError(f"task {self.id}: completed_at must be set exactly when it is done")
        if self.updated_at < self.created_at:
            raise ValueError(f"task {self.id}: updated before it was created")
        if len(set(self.labels)) != len(self.labels):
            raise ValueError(f"task {self.id}: a label is listed twice")
        if len(set(self.depends_on)) != len(self.depends_on) or self.id in self.depends_on:
            raise ValueError(f"task {self.id}: depends_on lists a task twice or the task itself")
        return self


class TasksState(EnvState):
    """The workspace: its members, projects and tasks; `me` is the member the agent acts as."""

    me: Id
    members: dict[str, Member] = Field(default_factory=dict, max_length=500)
    projects: dict[str, Project] = Field(default_factory=dict, max_length=MAX_PROJECTS)
    tasks: dict[str, Task] = Field(default_factory=dict, max_length=MAX_TASKS)

    @model_validator(mode="after")
    def _integrity(self) -> TasksState:
        comments = {c.id: c for t in self.tasks.values() for c in t.comments}
        problems = id_problems(
            self, {"mem": self.members, "prj": self.projects, "tsk": self.tasks, "cmt": comments}
        )
        if sum(len(t.comments) for t in self.tasks.values()) != len(comments):
            problems.append("a comment id is used twice")
        me = self.members.get(self.me)
        if me is None or not me.active:
            problems.append(f"me ({self.me}) must be an active member")
        emails: dict[str, str] = {}
        for m in self.members.values():
            if m.email.lower() in emails:
                problems.append(f"members {emails[m.email.lower()]} and {m.id} have the same email")
            emails[m.email.lower()] = m.id
        for p in self.projects.values():
            owner = self.members.get(p.owner_id)
            if owner is None or owner.role == "guest":
                problems.append(f"project {p.id}: owner {p.owner_id} must be a member who is not a guest")
            if p.created_at > self.now:
                problems.append(f"project {p.id} is created in the future")
        for t in self.tasks.values():
            project = self.projects.get(t.project_id)
            if project is None:
                problems.append(f"task {t.id} is in unknown project {t.project_id}")
            elif project.status == "archived" and t.status in OPEN:
                problems.append(f"task {t.id} is {t.status} in archived project {project.id}")
            if t.assignee_id is not None:
                assignee = self.members.get(t.assignee_id)
                if assignee is None or not assignee.active:
                    problems.append(f"task {t.id}: assignee {t.assignee_id} is not an active member")
            if t.updated_at > self.now:
                problems.append(f"task {t.id} is updated in the future")
            for c in t.comments:
                if c.author_id not in self.members:
                    problems.append(f"comment {c.id}: author {c.author_id} is not a member")
                if not t.created_at <= c.created_at <= self.now:
                    problems.append(f"comment {c.id} is dated outside its task's lifetime")
            for dep_id in t.depends_on:
                dep = self.tasks.get(dep_id)
                if dep is None or dep.project_id != t.project_id:
                    problems.append(f"task {t.id} depends on {dep_id}, which is not a task of its project")
                elif t.status == "done" and dep.status in OPEN:
                    problems.append(f"task {t.id} is done but depends on {dep_id}, which is {dep.status}")
        if cycle := _find_cycle(self):
            problems.append("dependency cycle: " + " -> ".join(cycle))
        if problems:
            raise ValueError("; ".join(problems))
        return self


def _find_cycle(state: TasksState) -> list[str]:
    """A dependency cycle as a path of task ids (first id repeated at the end), or [] when there is none."""
    colour: dict[str, int] = {}

    def visit(task_id: str, path: list[str]) -> list[str]:
        colour[task_id] = 1
        task = state.tasks.get(task_id)
        for dep in task.depends_on if task else []:
            if colour.get(dep) == 1:
                return [*path[path.index(dep) :], dep] if dep in path else [task_id, dep]
            if dep not in colour and (found := visit(dep, [*path, dep])):
                return found
        colour[task_id] = 2
        return []

    for task_id in sorted(state.tasks):
        if task_id not in colour and (found := visit(task_id, [task_id])):
            return found
    return []


# ---- results ------------------------------------------------------------------------------------------


class Person(_Model):
    id: str
    name: str
    email: str


class ProjectView(_Model):
    id: str
    name: str
    description: str
    status: Literal["active", "archived"]
    owner: Person
    created_at: NaiveDatetime
    archived_at: NaiveDatetime | None
    tasks_by_status: dict[Status, int]
    overdue_tasks: int = Field(description="Open tasks whose due date has passed.")


class TaskSummary(_Model):
    id: str
    project_id: str
    title: str
    status: Status
    priority: Priority
    assignee_email: str | None
    due_date: date | None
    overdue: bool
    blocked: bool = Field(description="Depends on a task that is still open.")
    labels: list[str]


class TaskView(Task):
    """A task with its assignee and what blocks it."""

    assignee: Person | None
    blocked_by: list[str] = Field(description="Ids of the open tasks this one depends on.")
    overdue: bool


class DeletedTask(_Model):
    id: str
    title: str
    project_id: str


env = Environment(
    "tasks",
    TasksState,
    version="1.0.0",
    domain="office",
    description=(
        "A team task tracker: projects with owners, tasks with assignees (by email), due dates, priorities, "
        "labels, dependencies and comments; status changes respect dependencies, and archived projects "
        "are read-only."
    ),
)


# ---- helpers ------------------------------------------------------------------------------------------


def _person(member: Member) -> Person:
    return Person(id=member.id, name=member.name, email=member.email)


def _project(state: TasksState, project_id: str) -> Project:
    return lookup(state.projects, project_id, "project", "List projects with list_projects.")


def _task(state: TasksState, task_id: str) -> Task:
    return lookup(state.tasks, task_id, "task", "Find tasks with list_tasks.")


def _member_by_email(state: TasksState, email: str) -> Member:
    for member in state.members.values():
        if member.email.lower() == email.strip().lower():
            if not member.active:
                raise ToolError(f"{member.name} ({member.email}) is no longer an active member.")
            return member
    raise ToolError(f"No member with email {email!r}. Find members with search_members.")


def _editable(state: TasksState, task_id: str) -> Task:
    task = _task(state, task_id)
    project = state.projects[task.project_id]
    if project.status == "archived":
        raise ToolError(
            f"Task {task.id} is in archived project {project.name!r} ({project.id}); it cannot change."
        )
    return task


def _open_deps(state: TasksState, task: Task) -> list[str]:
    return [d for d in task.depends_on if state.tasks[d].status in OPEN]


def _overdue(state: TasksState, task: Task) -> bool:
    return task.status in OPEN and task.due_date is not None and task.due_date < state.now.date()


def _view(state: TasksState, task: Task) -> TaskView:
    assignee = state.members.get(task.assignee_id) if task.assignee_id else None
    return TaskView(
        **task.model_dump(),
        assignee=_person(assignee) if assignee else None,
        blocked_by=_open_deps(state, task),
        overdue=_overdue(state, task),
    )


def _summary(state: TasksState, task: Task) -> TaskSummary:
    assignee = state.members.get(task.assignee_id) if task.assignee_id else None
    return TaskSummary(
        id=task.id,
        project_id=task.project_id,
        title=task.title,
        status=task.status,
        priority=task.priority,
        assignee_email=assignee.email if assignee else None,
        due_date=task.due_date,
        overdue=_overdue(state, task),
        blocked=bool(_open_deps(state, task)),
        labels=task.labels,
    )


def _project_view(state: TasksState, project: Project) -> ProjectView:
    tasks = [t for t in state.tasks.values() if t.project_id == project.id]
    counts: dict[Status, int] = {"todo": 0, "in_progress": 0, "done": 0, "cancelled": 0}
    for t in tasks:
        counts[t.status] += 1
    return ProjectView(
        id=project.id,
        name=project.name,
        description=project.description,
        status=project.status,
        owner=_person(state.members[project.owner_id]),
        created_at=project.created_at,
        archived_at=project.archived_at,
        tasks_by_status=counts,
        overdue_tasks=sum(_overdue(state, t) for t in tasks),
    )


def _touch(state: TasksState, task: Task) -> None:
    task.updated_at = state.now


def _check_due(state: TasksState, due: date) -> None:
    if due < state.now.date():
        raise ToolError(
            f"The due date {due.isoformat()} is in the past; today is {state.now.date().isoformat()}."
        )


def _sorted_tasks(tasks: list[Task]) -> list[Task]:
    return sorted(
        tasks, key=lambda t: (t.due_date is None, t.due_date or date.min, PRIORITY_RANK[t.priority], t.id)
    )


# ---- tools: projects and members ----------------------------------------------------------------------


@env.tool(read_only=True)
def list_projects(state: TasksState, include_archived: bool = False) -> list[ProjectView]:
    """List the workspace's projects with their owner and task counts by status.

    Args:
        include_archived: Also list archived projects (default false).
    """
    projects = [p for p in state.projects.values() if include_archived or p.status == "active"]
    return [_project_view(state, p) for p in sorted(projects, key=lambda p: p.id)]


@env.tool(read_only=True)
def get_project(state: TasksState, project_id: Id) -> ProjectView:
    """Get a project: description, owner, status and task counts.

    Args:
        project_id: The project's id, e.g. "prj_0001" (from list_projects).
    """
    return _project_view(state, _project(state, project_id))


@env.tool
def create_project(
    state: TasksState, name: Title, description: Text = "", owner_email: Email | None = None
) -> ProjectView:
    """Create a project. Its name must differ from every active project's (case is ignored).

    Args:
        name: The project's name, e.g. "Fabrikam onboarding".
        description: What the project is about.
        owner_email: The owner's email; omit to own it yourself. Guests cannot own projects.
    """
    if not name.strip():
        raise ToolError("The project name is blank.")
    for other in state.projects.values():
        if other.status == "active" and fold(other.name) == fold(name.strip()):
            raise ToolError(f"There is already an active project named {other.name!r} ({other.id}).")
    owner = state.members[state.me] if owner_email is None else _member_by_email(state, owner_email)
    if owner.role == "guest":
        raise ToolError(f"{owner.name} is a guest; guests cannot own projects. Pick a workspace member.")
    if len(state.projects) >= MAX_PROJECTS:
        raise ToolError(f"The workspace holds at most {MAX_PROJECTS} projects.")
    project = Project(
        id=state.new_id("prj"),
        name=name.strip(),
        description=description,
        owner_id=owner.id,
        created_at=state.now,
    )
    state.projects[project.id] = project
    return _project_view(state, project)


@env.tool(destructive=True)
def archive_project(state: TasksState, project_id: Id) -> ProjectView:
    """Archive a finished project: it becomes read-only and leaves list_projects' default listing.

    Every task must be done or cancelled first. Only the project's owner or a workspace owner or admin
    can archive it.

    Args:
        project_id: The project to archive, e.g. "prj_0003".
    """
    project = _project(state, project_id)
    if project.status == "archived":
        raise ToolError(
            f"Project {project.id} is already archived (since {project.archived_at.isoformat()})."
        )
    me = state.members[state.me]
    if project.owner_id != me.id and me.role not in ("owner", "admin"):
        owner = state.members[project.owner_id]
        raise ToolError(
            f"Only the project's owner ({owner.name}, {owner.email}) or a workspace owner or admin can archive it."
        )
    open_tasks = [
        t.id
        for t in sorted(state.tasks.values(), key=lambda t: t.id)
        if t.project_id == project.id and t.status in OPEN
    ]
    if open_tasks:
        raise ToolError(
            f"Project {project.id} still has {len(open_tasks)} open task(s): {', '.join(open_tasks[:10])}. "
            "Mark them done or cancelled first (set_task_status)."
        )
    project.status, project.archived_at = "archived", state.now
    return _project_view(state, project)


@env.tool(read_only=True)
def search_members(
    state: TasksState, query: Annotated[str, Field(min_length=1, max_length=200)]
) -> list[Member]:
    """Find workspace members (and guests) by name or email, e.g. "priya" or "contoso".

    Args:
        query: Words from the person's name or email address.
    """
    found = [m for m in state.members.values() if matches(query, m.name, m.email)]
    return sorted(found, key=lambda m: (fold(m.name), m.id))


# ---- tools: tasks -------------------------------------------------------------------------------------


@env.tool(read_only=True)
def list_tasks(
    state: TasksState,
    project_id: Id | None = None,
    status: Status | None = None,
    assignee_email: Email | None = None,
    due_before: date | None = None,
    label: Label | None = None,
    limit: Annotated[int, Field(ge=1, le=200)] = 50,
) -> list[TaskSummary]:
    """List tasks, soonest due first (then by priority); every filter is optional.

    Args:
        project_id: Only this project's tasks.
        status: Only tasks with this status: "todo", "in_progress", "done" or "cancelled".
        assignee_email: Only tasks assigned to this person.
        due_before: Only tasks due on or before this date, e.g. "2026-01-09".
        label: Only tasks with this label, e.g. "security".
        limit: The most tasks to return (1-200, default 50).
    """
    if project_id is not None:
        _project(state, project_id)
    assignee = _member_by_email(state, assignee_email).id if assignee_email is not None else None
    tasks = [
        t
        for t in state.tasks.values()
        if (project_id is None or t.project_id == project_id)
        and (status is None or t.status == status)
        and (assignee is None or t.assignee_id == assignee)
        and (due_before is None or (t.due_date is not None and t.due_date <= due_before))
        and (label is None or label in t.labels)
    ]
    return [_summary(state, t) for t in _sorted_tasks(tasks)[:limit]]


@env.tool(read_only=True)
def get_task(state: TasksState, task_id: Id) -> TaskView:
    """Get a task with its description, assignee, dependencies (and which of them block it) and comments.

    Args:
        task_id: The task's id, e.g. "tsk_0003" (from list_tasks).
    """
    return _view(state, _task(state, task_id))


@env.tool
def create_task(
    state: TasksState,
    project_id: Id,
    title: Title,
    description: Text = "",
    assignee_email: Email | None = None,
    due_date: date | None = None,
    priority: Priority = "medium",
    labels: Labels | None = None,
) -> TaskView:
    """Create a task in an active project.

    Args:
        project_id: The project, e.g. "prj_0001".
        title: A short title.
        description: Details.
        assignee_email: Who does it (a member's email); omit to leave it unassigned.
        due_date: When it is due, e.g. "2026-01-16"; not in the past.
        priority: "low", "medium" (default), "high" or "urgent".
        labels: Lower-case labels such as "security" or "content" (at most 10).
    """
    project = _project(state, project_id)
    if project.status == "archived":
        raise ToolError(
            f"Project {project.name!r} ({project.id}) is archived; create the task in an active project."
        )
    if not title.strip():
        raise ToolError("The title is blank.")
    assignee = _member_by_email(state, assignee_email) if assignee_email is not None else None
    if due_date is not None:
        _check_due(state, due_date)
    labels = labels or []
    if len(set(labels)) != len(labels):
        raise ToolError("A label is listed twice.")
    if len(state.tasks) >= MAX_TASKS:
        raise ToolError(f"The workspace holds at most {MAX_TASKS} tasks; delete some first.")
    task = Task(
        id=state.new_id("tsk"),
        project_id=project.id,
        title=title.strip(),
        description=description,
        priority=priority,
        assignee_id=assignee.id if assignee else None,
        due_date=due_date,
        labels=labels,
        created_at=state.now,
        updated_at=state.now,
    )
    state.tasks[task.id] = task
    return _view(state, task)


@env.tool(idempotent=True)
def update_task(
    state: TasksState,
    task_id: Id,
    title: Title | None = None,
    description: Text | None = None,
    priority: Priority | None = None,
    due_date: date | None = None,
    labels: Labels | None = None,
) -> TaskView:
    """Change a task's title, description, priority, due date or labels; omitted fields stay as they are.

    Use assign_task to change the assignee and set_task_status to change the status.

    Args:
        task_id: The task, e.g. "tsk_0006".
        title: The new title.
        description: The new description.
        priority: The new priority.
        due_date: The new due date; not in the past.
        labels: The new labels (replace the old ones; [] removes them all).
    """
    task = _editable(state, task_id)
    if title is None and description is None and priority is None and due_date is None and labels is None:
        raise ToolError("Nothing to change: give title, description, priority, due_date or labels.")
    if title is not None:
        if not title.strip():
            raise ToolError("The title is blank.")
        task.title = title.strip()
    if due_date is not None and due_date != task.due_date:
        _check_due(state, due_date)
        task.due_date = due_date
    if labels is not None:
        if len(set(labels)) != len(labels):
            raise ToolError("A label is listed twice.")
        task.labels = labels
    if description is not None:
        task.description = description
    if priority is not None:
        task.priority = priority
    _touch(state, task)
    return _view(state, task)


@env.tool(idempotent=True)
def assign_task(state: TasksState, task_id: Id, email: Email | None) -> TaskView:
    """Assign a task to a member by email, or unassign it.

    Args:
        task_id: The task, e.g. "tsk_0006".
        email: The new assignee's email (e.g. from search_members or a calendar contact); null unassigns.
    """
    task = _editable(state, task_id)
    assignee = _member_by_email(state, email) if email is not None else None
    new = assignee.id if assignee else None
    if task.assignee_id != new:
        task.assignee_id = new
        _touch(state, task)
    return _view(state, task)


@env.tool(idempotent=True)
def set_task_status(state: TasksState, task_id: Id, status: Status) -> TaskView:
    """Move a task to "todo", "in_progress", "done" or "cancelled".

    A task can only be done when every task it depends on is done or cancelled. A done or cancelled
    task cannot be reopened while a done task depends on it.

    Args:
        task_id: The task, e.g. "tsk_0003".
        status: The new status.
    """
    task = _editable(state, task_id)
    if task.status == status:
        return _view(state, task)
    if status == "done":
        blocking = _open_deps(state, task)
        if blocking:
            listed = ", ".join(f"{d} ({state.tasks[d].status})" for d in blocking)
            raise ToolError(f"Task {task.id} is blocked by {listed}; finish or cancel those first.")
        task.completed_at = state.now
    elif task.status in CLOSED and status in OPEN:
        dependants = sorted(
            t.id for t in state.tasks.values() if task.id in t.depends_on and t.status == "done"
        )
        if dependants:
            raise ToolError(
                f"Task {task.id} cannot be reopened: done task(s) {', '.join(dependants)} depend on it."
            )
    if status != "done":
        task.completed_at = None
    task.status = status
    _touch(state, task)
    return _view(state, task)


@env.tool(idempotent=True)
def add_dependency(state: TasksState, task_id: Id, depends_on_id: Id) -> TaskView:
    """Record that a task cannot be done before another task of the same project is closed.

    Refused when it would create a cycle, or when the task is done and the other task is still open.
    Adding an existing dependency changes nothing.

    Args:
        task_id: The task that has to wait, e.g. "tsk_0007".
        depends_on_id: The task it waits for, e.g. "tsk_0006".
    """
    task = _editable(state, task_id)
    dep = _task(state, depends_on_id)
    if dep.id == task.id:
        raise ToolError("A task cannot depend on itself.")
    if dep.project_id != task.project_id:
        raise ToolError(
            f"{dep.id} is in project {dep.project_id} and {task.id} in {task.project_id}; "
            "dependencies stay within one project."
        )
    if dep.id in task.depends_on:
        return _view(state, task)
    if len(task.depends_on) >= MAX_DEPENDENCIES:
        raise ToolError(f"Task {task.id} already has {MAX_DEPENDENCIES} dependencies.")
    if task.status == "done" and dep.status in OPEN:
        raise ToolError(f"Task {task.id} is done, so it cannot wait for {dep.id}, which is {dep.status}.")
    task.depends_on.append(dep.id)
    if cycle := _find_cycle(state):
        raise ToolError(f"That would create a dependency cycle: {' -> '.join(cycle)}.")
    _touch(state, task)
    return _view(state, task)


@env.tool
def add_comment(
    state: TasksState, task_id: Id, text: Annotated[str, Field(min_length=1, max_length=4000)]
) -> Comment:
    """Comment on a task as yourself.

    Args:
        task_id: The task, e.g. "tsk_0005".
        text: The comment.
    """
    task = _editable(state, task_id)
    if not text.strip():
        raise ToolError("The comment is blank.")
    if len(task.comments) >= MAX_COMMENTS:
        raise ToolError(f"Task {task.id} has the maximum of {MAX_COMMENTS} comments.")
    comment = Comment(id=state.new_id("cmt"), author_id=state.me, text=text.strip(), created_at=state.now)
    task.comments.append(comment)
    _touch(state, task)
    return comment


@env.tool(destructive=True)
def delete_task(state: TasksState, task_id: Id) -> DeletedTask:
    """Delete a task and its comments. Refused while other tasks depend on it (cancel it instead).

    Args:
        task_id: The task to delete, e.g. "tsk_0015".
    """
    task = _editable(state, task_id)
    dependants = sorted(t.id for t in state.tasks.values() if task.id in t.depends_on)
    if dependants:
        raise ToolError(
            f"Task(s) {', '.join(dependants)} depend on {task.id}; cancel it with set_task_status instead "
            "(a cancelled task no longer blocks anything)."
        )
    del state.tasks[task.id]
    return DeletedTask(id=task.id, title=task.title, project_id=task.project_id)
