// The types a TypeScript model handler (`backend: "typescript"`, model.ts / model.js) is
// written against. Types only: the package entry re-exports them, and nothing here exists
// at run time.
export {};
