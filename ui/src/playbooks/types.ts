// The catalog routes (milepost/api/routers/catalog.py) and the validation
// (milepost/api/schemas_catalog.py).

export interface CatalogEntry {
  path: string;
  version: number;
  catalog_id: string;
  created_at: string | null;
}

export interface CatalogResource extends CatalogEntry {
  content: string;
}

export interface Problem {
  message: string;
  line: number | null;
  step: string | null;
  scope: string | null;
  field: string | null;
}

/** What POST /api/catalog/validate found: problems (a 422) or warnings (a 200). */
export interface Checked {
  problems: Problem[];
  warnings: Problem[];
}
