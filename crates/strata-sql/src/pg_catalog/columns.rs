//! The columns of each catalog `pg_catalog` has, in PostgreSQL 15's order, and which catalogs
//! strata keeps empty (it has no policies, publications, inheritance, triggers, rules,
//! defaults, comments, sequences, enums or extensions).

use super::{Columns, Ty};

use Ty::{Bool, Float4, Int2, Int2Vector, Int2s, Int4, Oid, OidVector, Oids, Text, Texts, Timestamp};

const PG_NAMESPACE: Columns = &[("oid", Oid), ("nspname", Text), ("nspowner", Oid), ("nspacl", Texts)];

const PG_CLASS: Columns = &[
    ("oid", Oid),
    ("relname", Text),
    ("relnamespace", Oid),
    ("reltype", Oid),
    ("reloftype", Oid),
    ("relowner", Oid),
    ("relam", Oid),
    ("relfilenode", Oid),
    ("reltablespace", Oid),
    ("relpages", Int4),
    ("reltuples", Float4),
    ("relallvisible", Int4),
    ("reltoastrelid", Oid),
    ("relhasindex", Bool),
    ("relisshared", Bool),
    ("relpersistence", Text),
    ("relkind", Text),
    ("relnatts", Int2),
    ("relchecks", Int2),
    ("relhasrules", Bool),
    ("relhastriggers", Bool),
    ("relhassubclass", Bool),
    ("relrowsecurity", Bool),
    ("relforcerowsecurity", Bool),
    ("relispopulated", Bool),
    ("relreplident", Text),
    ("relispartition", Bool),
    ("relrewrite", Oid),
    ("relfrozenxid", Oid),
    ("relminmxid", Oid),
    ("relacl", Texts),
    ("reloptions", Texts),
    ("relpartbound", Text),
];

const PG_ATTRIBUTE: Columns = &[
    ("attrelid", Oid),
    ("attname", Text),
    ("atttypid", Oid),
    ("attstattarget", Int4),
    ("attlen", Int2),
    ("attnum", Int2),
    ("attndims", Int4),
    ("attcacheoff", Int4),
    ("atttypmod", Int4),
    ("attbyval", Bool),
    ("attalign", Text),
    ("attstorage", Text),
    ("attcompression", Text),
    ("attnotnull", Bool),
    ("atthasdef", Bool),
    ("atthasmissing", Bool),
    ("attidentity", Text),
    ("attgenerated", Text),
    ("attisdropped", Bool),
    ("attislocal", Bool),
    ("attinhcount", Int4),
    ("attcollation", Oid),
    ("attacl", Texts),
    ("attoptions", Texts),
    ("attfdwoptions", Texts),
    ("attmissingval", Texts),
];

const PG_INDEX: Columns = &[
    ("indexrelid", Oid),
    ("indrelid", Oid),
    ("indnatts", Int2),
    ("indnkeyatts", Int2),
    ("indisunique", Bool),
    ("indnullsnotdistinct", Bool),
    ("indisprimary", Bool),
    ("indisexclusion", Bool),
    ("indimmediate", Bool),
    ("indisclustered", Bool),
    ("indisvalid", Bool),
    ("indcheckxmin", Bool),
    ("indisready", Bool),
    ("indislive", Bool),
    ("indisreplident", Bool),
    ("indkey", Int2Vector),
    ("indcollation", OidVector),
    ("indclass", OidVector),
    ("indoption", Int2Vector),
    ("indexprs", Text),
    ("indpred", Text),
];

const PG_CONSTRAINT: Columns = &[
    ("oid", Oid),
    ("conname", Text),
    ("connamespace", Oid),
    ("contype", Text),
    ("condeferrable", Bool),
    ("condeferred", Bool),
    ("convalidated", Bool),
    ("conrelid", Oid),
    ("contypid", Oid),
    ("conindid", Oid),
    ("conparentid", Oid),
    ("confrelid", Oid),
    ("confupdtype", Text),
    ("confdeltype", Text),
    ("confmatchtype", Text),
    ("conislocal", Bool),
    ("coninhcount", Int4),
    ("connoinherit", Bool),
    ("conkey", Int2s),
    ("confkey", Int2s),
    ("conpfeqop", Oids),
    ("conppeqop", Oids),
    ("conffeqop", Oids),
    ("confdelsetcols", Int2s),
    ("conexclop", Oids),
    ("conbin", Text),
];

const PG_TYPE: Columns = &[
    ("oid", Oid),
    ("typname", Text),
    ("typnamespace", Oid),
    ("typowner", Oid),
    ("typlen", Int2),
    ("typbyval", Bool),
    ("typtype", Text),
    ("typcategory", Text),
    ("typispreferred", Bool),
    ("typisdefined", Bool),
    ("typdelim", Text),
    ("typrelid", Oid),
    ("typsubscript", Oid),
    ("typelem", Oid),
    ("typarray", Oid),
    ("typinput", Text),
    ("typoutput", Text),
    ("typreceive", Text),
    ("typsend", Text),
    ("typmodin", Text),
    ("typmodout", Text),
    ("typanalyze", Text),
    ("typalign", Text),
    ("typstorage", Text),
    ("typnotnull", Bool),
    ("typbasetype", Oid),
    ("typtypmod", Int4),
    ("typndims", Int4),
    ("typcollation", Oid),
    ("typdefaultbin", Text),
    ("typdefault", Text),
    ("typacl", Texts),
];

const PG_AM: Columns = &[("oid", Oid), ("amname", Text), ("amhandler", Text), ("amtype", Text)];

const PG_DATABASE: Columns = &[
    ("oid", Oid),
    ("datname", Text),
    ("datdba", Oid),
    ("encoding", Int4),
    ("datlocprovider", Text),
    ("datistemplate", Bool),
    ("datallowconn", Bool),
    ("datconnlimit", Int4),
    ("datfrozenxid", Oid),
    ("datminmxid", Oid),
    ("dattablespace", Oid),
    ("datcollate", Text),
    ("datctype", Text),
    ("daticulocale", Text),
    ("datcollversion", Text),
    ("datacl", Texts),
];

const PG_ROLES: Columns = &[
    ("rolname", Text),
    ("rolsuper", Bool),
    ("rolinherit", Bool),
    ("rolcreaterole", Bool),
    ("rolcreatedb", Bool),
    ("rolcanlogin", Bool),
    ("rolreplication", Bool),
    ("rolconnlimit", Int4),
    ("rolpassword", Text),
    ("rolvaliduntil", Timestamp),
    ("rolbypassrls", Bool),
    ("rolconfig", Texts),
    ("oid", Oid),
];

const PG_USER: Columns = &[
    ("usename", Text),
    ("usesysid", Oid),
    ("usecreatedb", Bool),
    ("usesuper", Bool),
    ("userepl", Bool),
    ("usebypassrls", Bool),
    ("passwd", Text),
    ("valuntil", Timestamp),
    ("useconfig", Texts),
];

const PG_TABLESPACE: Columns =
    &[("oid", Oid), ("spcname", Text), ("spcowner", Oid), ("spcacl", Texts), ("spcoptions", Texts)];

const PG_TABLES: Columns = &[
    ("schemaname", Text),
    ("tablename", Text),
    ("tableowner", Text),
    ("tablespace", Text),
    ("hasindexes", Bool),
    ("hasrules", Bool),
    ("hastriggers", Bool),
    ("rowsecurity", Bool),
];

const PG_VIEWS: Columns = &[("schemaname", Text), ("viewname", Text), ("viewowner", Text), ("definition", Text)];

const PG_INDEXES: Columns =
    &[("schemaname", Text), ("tablename", Text), ("indexname", Text), ("tablespace", Text), ("indexdef", Text)];

// The catalogs strata keeps empty.

const PG_ATTRDEF: Columns = &[("oid", Oid), ("adrelid", Oid), ("adnum", Int2), ("adbin", Text)];

const PG_COLLATION: Columns = &[
    ("oid", Oid),
    ("collname", Text),
    ("collnamespace", Oid),
    ("collowner", Oid),
    ("collprovider", Text),
    ("collisdeterministic", Bool),
    ("collencoding", Int4),
    ("collcollate", Text),
    ("collctype", Text),
    ("colliculocale", Text),
    ("collversion", Text),
];

const PG_DESCRIPTION: Columns = &[("objoid", Oid), ("classoid", Oid), ("objsubid", Int4), ("description", Text)];

const PG_SHDESCRIPTION: Columns = &[("objoid", Oid), ("classoid", Oid), ("description", Text)];

const PG_POLICY: Columns = &[
    ("oid", Oid),
    ("polname", Text),
    ("polrelid", Oid),
    ("polcmd", Text),
    ("polpermissive", Bool),
    ("polroles", Oids),
    ("polqual", Text),
    ("polwithcheck", Text),
];

const PG_STATISTIC_EXT: Columns = &[
    ("oid", Oid),
    ("stxrelid", Oid),
    ("stxname", Text),
    ("stxnamespace", Oid),
    ("stxowner", Oid),
    ("stxstattarget", Int4),
    ("stxkeys", Int2s),
    ("stxkind", Texts),
    ("stxexprs", Text),
];

const PG_PUBLICATION: Columns = &[
    ("oid", Oid),
    ("pubname", Text),
    ("pubowner", Oid),
    ("puballtables", Bool),
    ("pubinsert", Bool),
    ("pubupdate", Bool),
    ("pubdelete", Bool),
    ("pubtruncate", Bool),
    ("pubviaroot", Bool),
];

const PG_PUBLICATION_NAMESPACE: Columns = &[("oid", Oid), ("pnpubid", Oid), ("pnnspid", Oid)];

const PG_PUBLICATION_REL: Columns =
    &[("oid", Oid), ("prpubid", Oid), ("prrelid", Oid), ("prqual", Text), ("prattrs", Int2s)];

const PG_INHERITS: Columns = &[("inhrelid", Oid), ("inhparent", Oid), ("inhseqno", Int4), ("inhdetachpending", Bool)];

const PG_TRIGGER: Columns = &[
    ("oid", Oid),
    ("tgrelid", Oid),
    ("tgparentid", Oid),
    ("tgname", Text),
    ("tgfoid", Oid),
    ("tgtype", Int2),
    ("tgenabled", Text),
    ("tgisinternal", Bool),
    ("tgconstrrelid", Oid),
    ("tgconstrindid", Oid),
    ("tgconstraint", Oid),
    ("tgdeferrable", Bool),
    ("tginitdeferred", Bool),
    ("tgnargs", Int2),
    ("tgattr", Int2s),
    ("tgargs", Text),
    ("tgqual", Text),
    ("tgoldtable", Text),
    ("tgnewtable", Text),
];

const PG_REWRITE: Columns = &[
    ("oid", Oid),
    ("rulename", Text),
    ("ev_class", Oid),
    ("ev_type", Text),
    ("ev_enabled", Text),
    ("is_instead", Bool),
    ("ev_qual", Text),
    ("ev_action", Text),
];

const PG_ENUM: Columns = &[("oid", Oid), ("enumtypid", Oid), ("enumsortorder", Float4), ("enumlabel", Text)];

const PG_SEQUENCE: Columns = &[
    ("seqrelid", Oid),
    ("seqtypid", Oid),
    ("seqstart", Oid),
    ("seqincrement", Oid),
    ("seqmax", Oid),
    ("seqmin", Oid),
    ("seqcache", Oid),
    ("seqcycle", Bool),
];

const PG_DEPEND: Columns = &[
    ("classid", Oid),
    ("objid", Oid),
    ("objsubid", Int4),
    ("refclassid", Oid),
    ("refobjid", Oid),
    ("refobjsubid", Int4),
    ("deptype", Text),
];

const PG_PARTITIONED_TABLE: Columns = &[
    ("partrelid", Oid),
    ("partstrat", Text),
    ("partnatts", Int2),
    ("partdefid", Oid),
    ("partattrs", Int2s),
    ("partclass", Oids),
    ("partcollation", Oids),
    ("partexprs", Text),
];

const PG_FOREIGN_TABLE: Columns = &[("ftrelid", Oid), ("ftserver", Oid), ("ftoptions", Texts)];

const PG_EXTENSION: Columns = &[
    ("oid", Oid),
    ("extname", Text),
    ("extowner", Oid),
    ("extnamespace", Oid),
    ("extrelocatable", Bool),
    ("extversion", Text),
    ("extconfig", Oids),
    ("extcondition", Texts),
];

const PG_MATVIEWS: Columns = &[
    ("schemaname", Text),
    ("matviewname", Text),
    ("matviewowner", Text),
    ("tablespace", Text),
    ("hasindexes", Bool),
    ("ispopulated", Bool),
    ("definition", Text),
];

const PG_AUTH_MEMBERS: Columns =
    &[("oid", Oid), ("roleid", Oid), ("member", Oid), ("grantor", Oid), ("admin_option", Bool)];

const PG_OPCLASS: Columns = &[
    ("oid", Oid),
    ("opcmethod", Oid),
    ("opcname", Text),
    ("opcnamespace", Oid),
    ("opcowner", Oid),
    ("opcfamily", Oid),
    ("opcintype", Oid),
    ("opcdefault", Bool),
    ("opckeytype", Oid),
];

/// Every catalog with its columns.
pub(super) const CATALOGS: &[(&str, Columns)] = &[
    ("pg_namespace", PG_NAMESPACE),
    ("pg_class", PG_CLASS),
    ("pg_attribute", PG_ATTRIBUTE),
    ("pg_index", PG_INDEX),
    ("pg_constraint", PG_CONSTRAINT),
    ("pg_type", PG_TYPE),
    ("pg_am", PG_AM),
    ("pg_database", PG_DATABASE),
    ("pg_roles", PG_ROLES),
    ("pg_user", PG_USER),
    ("pg_tablespace", PG_TABLESPACE),
    ("pg_tables", PG_TABLES),
    ("pg_views", PG_VIEWS),
    ("pg_indexes", PG_INDEXES),
    ("pg_attrdef", PG_ATTRDEF),
    ("pg_collation", PG_COLLATION),
    ("pg_description", PG_DESCRIPTION),
    ("pg_shdescription", PG_SHDESCRIPTION),
    ("pg_policy", PG_POLICY),
    ("pg_statistic_ext", PG_STATISTIC_EXT),
    ("pg_publication", PG_PUBLICATION),
    ("pg_publication_namespace", PG_PUBLICATION_NAMESPACE),
    ("pg_publication_rel", PG_PUBLICATION_REL),
    ("pg_inherits", PG_INHERITS),
    ("pg_trigger", PG_TRIGGER),
    ("pg_rewrite", PG_REWRITE),
    ("pg_enum", PG_ENUM),
    ("pg_sequence", PG_SEQUENCE),
    ("pg_depend", PG_DEPEND),
    ("pg_partitioned_table", PG_PARTITIONED_TABLE),
    ("pg_foreign_table", PG_FOREIGN_TABLE),
    ("pg_extension", PG_EXTENSION),
    ("pg_matviews", PG_MATVIEWS),
    ("pg_auth_members", PG_AUTH_MEMBERS),
    ("pg_opclass", PG_OPCLASS),
];

/// The catalogs that have no rows whatever the database holds.
pub(crate) const ALWAYS_EMPTY: &[&str] = &[
    "pg_attrdef",
    "pg_collation",
    "pg_description",
    "pg_shdescription",
    "pg_policy",
    "pg_statistic_ext",
    "pg_publication",
    "pg_publication_namespace",
    "pg_publication_rel",
    "pg_inherits",
    "pg_trigger",
    "pg_rewrite",
    "pg_enum",
    "pg_sequence",
    "pg_depend",
    "pg_partitioned_table",
    "pg_foreign_table",
    "pg_extension",
    "pg_matviews",
    "pg_auth_members",
    "pg_opclass",
];

/// The columns of catalog `name`, if `pg_catalog` has it.
pub(crate) fn columns_of(name: &str) -> Option<Columns> {
    CATALOGS.iter().find(|(n, _)| *n == name).map(|(_, c)| *c)
}
