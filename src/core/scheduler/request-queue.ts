// A FIFO queue with O(1) push/shift and removal by marking, for request and sequence
// queues on the hot path (Array.prototype.shift is O(n)).

export class Deque<T> {
  #items: (T | undefined)[] = [];
  #head = 0;

  get length(): number {
    return this.#items.length - this.#head;
  }

  push(item: T): void {
    this.#items.push(item);
  }

  /** Puts `item` first (a request that must run again before those behind it). */
  unshift(item: T): void {
    if (this.#head > 0) this.#items[--this.#head] = item;
    else this.#items.unshift(item);
  }

  peek(): T | undefined {
    return this.#items[this.#head];
  }

  at(index: number): T | undefined {
    return this.#items[this.#head + index];
  }

  shift(): T | undefined {
    if (this.#head >= this.#items.length) return undefined;
    const item = this.#items[this.#head];
    this.#items[this.#head++] = undefined;
    if (this.#head === this.#items.length) {
      // Empty: start over, so a long-lived queue (a sequence's) does not keep a slot per
      // request it ever held.
      this.#items.length = 0;
      this.#head = 0;
    } else if (this.#head > 1024 && this.#head * 2 > this.#items.length) {
      this.#items = this.#items.slice(this.#head);
      this.#head = 0;
    }
    return item;
  }

  /** Removes the first item matching `predicate`; O(n), for rare removals (cancellation). */
  remove(predicate: (item: T) => boolean): T | undefined {
    for (let i = this.#head; i < this.#items.length; i++) {
      const item = this.#items[i] as T;
      if (predicate(item)) {
        this.#items.splice(i, 1);
        return item;
      }
    }
    return undefined;
  }

  /** Puts `item` in the place of the first item matching `predicate`; false when none does. */
  replace(predicate: (item: T) => boolean, item: T): boolean {
    for (let i = this.#head; i < this.#items.length; i++) {
      if (predicate(this.#items[i] as T)) {
        this.#items[i] = item;
        return true;
      }
    }
    return false;
  }

  /** Removes and returns every item. */
  drain(): T[] {
    const items = this.#items.slice(this.#head) as T[];
    this.#items = [];
    this.#head = 0;
    return items;
  }

  *[Symbol.iterator](): IterableIterator<T> {
    for (let i = this.#head; i < this.#items.length; i++) yield this.#items[i] as T;
  }
}
