// A thread's branches (regenerate, edit) as the server stores them: each branch is a whole
// conversation, and branches share the messages before the one they were started at. From
// those lists alone this finds where the current branch has sibling versions, for the
// playground's "< 2/3 >" pickers.

/**
 * Where the thread's branches differ, as the server stores them: for each message of the
 * current branch, the versions other branches with the same messages before it hold there.
 * ``[{index, ids, branchOf}]`` for the places with more than one version; ``branchOf`` maps a
 * version to the branch shown when it is picked (the current one for its own, else the
 * newest that holds it).
 */
export function divergences(branches, lists, current) {
  const found = [];
  let alive = branches.map((_, k) => k);
  const currentIndex = branches.findIndex((b) => b.current);
  if (currentIndex < 0) return found;
  for (let index = 0; index < current.length && alive.length > 1; index += 1) {
    const ids = [];
    const branchOf = new Map();
    for (const k of alive) {
      const id = lists[k][index]?.id;
      if (id === undefined) continue;
      if (!ids.includes(id)) ids.push(id);
      if (k === currentIndex || branchOf.get(id) !== branches[currentIndex].id) {
        branchOf.set(id, branches[k].id);
      }
    }
    if (ids.length > 1) found.push({ index, ids, branchOf });
    alive = alive.filter((k) => lists[k][index]?.id === current[index].id);
  }
  return found;
}
